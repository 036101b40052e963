"""Whether the compiled twins of the hot loops are used, decided once for the process.

Each accelerated module imports its compiled twin behind ``EXTENSIONS_ENABLED`` and keeps its
pure-Python implementation, the reference, as the fallback::

    from .._speedups import EXTENSIONS_ENABLED, missing
    if EXTENSIONS_ENABLED:
        try:
            from ._record_c import write_v4
        except ImportError:
            missing("rocketstore.store.log._record_c")

``ROCKETSTORE_NO_EXTENSIONS=1`` (any non-empty value) selects the pure-Python code everywhere.
A package built without a C compiler has no compiled modules: it works the same, slower, and
says so in one log line (logger ``rocketstore``, WARNING) the first time an accelerated module finds its twin missing.
"""

from __future__ import annotations

import logging
import os

EXTENSIONS_ENABLED = not os.environ.get("ROCKETSTORE_NO_EXTENSIONS")
"""False when ``ROCKETSTORE_NO_EXTENSIONS`` is set: every module uses its Python code."""

_missing: list[str] = []


def missing(module: str) -> None:
    """Note that the compiled ``module`` could not be imported (one log line per process)."""
    if not _missing:
        logging.getLogger("rocketstore").warning(
            "rocketstore's compiled core is not available (%s missing): running in pure Python,"
            " slower; reinstall with a C compiler and the Python headers to build it, or set"
            " ROCKETSTORE_NO_EXTENSIONS=1 to choose pure Python and silence this",
            module,
        )
    _missing.append(module)


def missing_modules() -> tuple[str, ...]:
    """The compiled modules found missing so far (empty when all were there or not wanted)."""
    return tuple(_missing)
