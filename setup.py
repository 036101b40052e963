"""Build of rocketstore's optional compiled core (everything else is in pyproject.toml).

The hot per-message loops have Cython twins (``*_c.pyx`` beside the module they accelerate);
Cython comes from ``[build-system] requires``. The extensions are optional: without a C
compiler or the Python headers the build says so in one line and the package installs in pure
Python (``rocketstore._speedups`` then uses the Python code, which is the reference anyway).

The modules of the per-message path that are glue between those loops (the send processor,
the commit log's put, dispatch, the index, the remoting codec and connection) are compiled as
they are by mypyc (from mypy, also in ``[build-system] requires``), from the same typed
sources: there is no second copy of them. ``ROCKETSTORE_NO_EXTENSIONS=1`` loads their sources
instead (``rocketstore._speedups``).
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCES = {
    "rocketstore.store.log._record_c": "src/rocketstore/store/log/_record_c.pyx",
    "rocketstore.store.log._put_core_c": "src/rocketstore/store/log/_put_core_c.pyx",
    "rocketstore.store._java_hash_c": "src/rocketstore/store/_java_hash_c.pyx",
    "rocketstore.store.read._raw_read_c": "src/rocketstore/store/read/_raw_read_c.pyx",
    "rocketstore.store.queue._unit_write_c": "src/rocketstore/store/queue/_unit_write_c.pyx",
    "rocketstore.store.queue._index_write_c": "src/rocketstore/store/queue/_index_write_c.pyx",
    "rocketstore.broker.messaging._send_scan_c": (
        "src/rocketstore/broker/messaging/_send_scan_c.pyx"
    ),
}

# compiled by mypyc as they are (rocketstore._speedups.COMPILED_MODULES names the same modules)
MYPYC_MODULES = (
    "src/rocketstore/broker/messaging/_send.py",
    "src/rocketstore/broker/messaging/_send_frame.py",
    "src/rocketstore/broker/state/_stats.py",
    "src/rocketstore/broker/state/_long_poll.py",
    "src/rocketstore/remoting/_command.py",
    "src/rocketstore/remoting/_send_header.py",
    "src/rocketstore/remoting/_connection.py",
    "src/rocketstore/remoting/_client.py",  # its ClientConnection derives from Connection
    "src/rocketstore/store/_store.py",
    "src/rocketstore/store/log/_commit_log.py",
    "src/rocketstore/store/queue/_reput.py",
    "src/rocketstore/store/queue/_index.py",
    "src/rocketstore/store/queue/_consume_queue.py",
)
MYPYC_GROUP = "rocketstore"  # the shared library: rocketstore__mypyc


class OptionalBuildExt(build_ext):
    """build_ext that installs the package without its compiled core when compiling fails."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers: the pure-Python package still works
            self._skip(exc)

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # pip passes no -j: use every core, for extensions and C files
            self.parallel = os.cpu_count() or 1

    def build_extensions(self) -> None:
        _compile_in_parallel(self.compiler, int(self.parallel or 1))
        # mypyc's modules are small shims over one shared library: build that first, and
        # none of the shims without it (a shim that cannot load would hide the .py source)
        library = [e for e in self.extensions if e.name.endswith("__mypyc")]
        others = [e for e in self.extensions if e not in library]
        shims = [e for e in others if _is_mypyc_shim(e)]
        self.check_extensions_list(self.extensions)
        self._done, self._total = 0, len(self.extensions)
        for ext in library:
            if not self._build(ext):
                others = [e for e in others if e not in shims]
        for ext in others:
            self._build(ext)

    def _build(self, ext: Extension) -> bool:
        self._done += 1
        what = ext.name
        if ext.name.endswith("__mypyc"):
            what = "the glue modules' shared library (the longest step)"
        _progress(f"compiling {what} ({self._done} of {self._total})")
        try:
            self.build_extension(ext)
        except Exception as exc:
            self._skip(exc, ext.name)
            return False
        return True

    @staticmethod
    def _skip(exc: Exception, name: str = "the compiled core") -> None:
        print(
            f"rocketstore: could not build {name} ({exc}); installing the pure-Python code",
            file=sys.stderr,
        )


def _compile_in_parallel(compiler: Any, jobs: int) -> None:
    """Have ``compiler`` compile an extension's C files ``jobs`` at a time: mypyc writes the
    glue modules' library as one C file a module (``multi_file``), and distutils would
    otherwise compile them one after another."""
    if jobs <= 1 or getattr(compiler, "_rocketstore_parallel", False):
        return

    def compile_(
        sources: list[str],
        output_dir: str | None = None,
        macros: Any = None,
        include_dirs: Any = None,
        debug: bool = False,
        extra_preargs: Any = None,
        extra_postargs: Any = None,
        depends: Any = None,
    ) -> list[str]:
        macros, objects, extra, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs
        )
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj: str) -> None:
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, extra, pp_opts)

        with ThreadPoolExecutor(jobs) as pool:
            list(pool.map(one, objects))
        return list(objects)

    compiler.compile = compile_
    compiler._rocketstore_parallel = True


def _progress(line: str) -> None:
    """One line of the build's progress on standard error (``pip install -v`` shows it)."""
    print(f"rocketstore: {line}", file=sys.stderr, flush=True)


def _is_mypyc_shim(ext: Extension) -> bool:
    return any(str(src).endswith(".c") and "__native" not in str(src) for src in ext.sources) and (
        ext.name.replace(".", "/") + ".py"
    ) in {m.removeprefix("src/") for m in MYPYC_MODULES}


def cython_extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print(
            "rocketstore: Cython is not available; installing the pure-Python code", file=sys.stderr
        )
        return []
    exts = [Extension(name, [src], optional=True) for name, src in SOURCES.items()]
    _progress(f"translating {len(exts)} Cython modules to C")
    return cythonize(exts, compiler_directives={"language_level": "3"}, quiet=True)


def mypyc_extensions() -> list[Extension]:
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("rocketstore: mypyc is not available; the glue modules stay Python", file=sys.stderr)
        return []
    _progress(f"translating {len(MYPYC_MODULES)} modules to C with mypyc (type-checks them first)")
    try:  # third-party imports are not needed to compile (the build may not have them)
        return mypycify(
            ["--ignore-missing-imports", *MYPYC_MODULES],
            group_name=MYPYC_GROUP,
            opt_level="3",
            multi_file=True,  # a C file a module, compiled in parallel (_compile_in_parallel)
        )
    except BaseException as exc:  # mypyc exits on a type error: the package still installs
        print(f"rocketstore: mypyc failed ({exc!r}); the glue modules stay Python", file=sys.stderr)
        return []


def extensions() -> list[Extension]:
    return cython_extensions() + mypyc_extensions()


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
