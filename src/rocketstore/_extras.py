"""What to install when an optional part of rocketstore is missing.

The optional parts come with the extras of ``pyproject.toml``: ``spark`` (pyspark, pyarrow,
numpy: the Spark source, export / import, the tiered store's Parquet); the metrics endpoint's
prometheus-client is a dependency of rocketstore itself. rocketstore is installed from a checkout, not from a
package index, so naming the package with an extra finds nothing: a hint names the extra's
own packages, which install into the environment rocketstore runs in without rebuilding it,
and the checkout's form of the same. ``tests/test_base_install.py`` keeps ``EXTRAS`` equal to
pyproject's lists.

Pure functions; any thread.
"""

from __future__ import annotations

EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "pyarrow", "numpy"),
}
"""Each extra's packages, as pip names them (without their version bounds)."""


def install_hint(extra: str, packages: tuple[str, ...] | None = None) -> str:
    """The commands that bring ``packages`` (default: all of ``extra``'s) into the running
    environment, e.g. ``pip install pyarrow numpy (from a rocketstore checkout: pip install
    '.[spark]')``."""
    names = packages if packages is not None else EXTRAS[extra]
    return f"pip install {' '.join(names)} (from a rocketstore checkout: pip install '.[{extra}]')"


METRICS_HINT = "pip install prometheus-client (a dependency of rocketstore: install it again)"
"""What brings back the metrics endpoint's package where it was removed."""

__all__ = ["EXTRAS", "METRICS_HINT", "install_hint"]
