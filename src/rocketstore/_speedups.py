"""Whether the compiled twins of the hot loops are used, decided once for the process.

Each accelerated module imports its compiled twin behind ``EXTENSIONS_ENABLED`` and keeps its
pure-Python implementation, the reference, as the fallback::

    from .._speedups import EXTENSIONS_ENABLED, missing
    if EXTENSIONS_ENABLED:
        try:
            from ._record_c import write_v4
        except ImportError:
            missing("rocketstore.store.log._record_c")

A few modules are compiled as they are by mypyc (``COMPILED_MODULES``; see setup.py): a
built module takes the place of its ``.py`` file. With ``ROCKETSTORE_NO_EXTENSIONS`` set, or
when mypyc's shared library cannot be loaded, an import hook installed here (before any of them
is imported: the package imports this module first) loads their sources instead.

``ROCKETSTORE_NO_EXTENSIONS=1`` (any non-empty value) selects the pure-Python code everywhere.
A package built without a C compiler has no compiled modules: it works the same, slower, and
says so in one log line (logger ``rocketstore``, WARNING) the first time an accelerated module finds its twin missing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType

EXTENSIONS_ENABLED = not os.environ.get("ROCKETSTORE_NO_EXTENSIONS")
"""False when ``ROCKETSTORE_NO_EXTENSIONS`` is set: every module uses its Python code."""

COMPILED_MODULES = frozenset(
    {
        "rocketstore.broker.messaging._send",
        "rocketstore.broker.messaging._send_frame",
        "rocketstore.broker.state._stats",
        "rocketstore.broker.state._long_poll",
        "rocketstore.remoting._command",
        "rocketstore.remoting._send_header",
        "rocketstore.remoting._connection",
        "rocketstore.remoting._client",
        "rocketstore.store._store",
        "rocketstore.store.log._commit_log",
        "rocketstore.store.queue._reput",
        "rocketstore.store.queue._index",
        "rocketstore.store.queue._consume_queue",
    }
)
"""The modules mypyc compiles from their own sources (setup.py's MYPYC_MODULES)."""

MYPYC_LIBRARY = "rocketstore__mypyc"

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


class SourceFinder(importlib.abc.MetaPathFinder):
    """Finds ``COMPILED_MODULES`` as their ``.py`` sources, never as built modules."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED_MODULES:
            return None
        name = fullname.rpartition(".")[2] + ".py"
        for entry in path or ():
            source = os.path.join(entry, name)
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def _compiled_glue_loads() -> bool:
    """Whether mypyc's modules can be imported: True also when none was built (then the
    sources load anyway); False when built ones are there but their library fails."""
    if importlib.util.find_spec(MYPYC_LIBRARY) is None:
        return True  # not built: nothing shadows the sources
    try:
        importlib.import_module(MYPYC_LIBRARY)
    except ImportError:
        return False
    return True


def _install_source_finder() -> None:
    if not any(isinstance(f, SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder())


if not EXTENSIONS_ENABLED:
    _install_source_finder()
elif not _compiled_glue_loads():
    _install_source_finder()
    missing(MYPYC_LIBRARY)


def compiled_glue() -> bool:
    """Whether the mypyc-compiled modules are the ones imported (checked on one of them)."""
    module = sys.modules.get("rocketstore.store.log._commit_log")
    if module is None:
        spec = importlib.util.find_spec("rocketstore.store.log._commit_log")
        origin = spec.origin if spec is not None else None
    else:
        origin = getattr(module, "__file__", None)
    return bool(origin) and not str(origin).endswith(".py")
