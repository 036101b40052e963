"""Build of rocketstore's optional compiled core (everything else is in pyproject.toml).

The hot per-message loops have Cython twins (``*_c.pyx`` beside the module they accelerate);
Cython comes from ``[build-system] requires``. The extensions are optional: without a C
compiler or the Python headers the build says so in one line and the package installs in pure
Python (``rocketstore._speedups`` then uses the Python code, which is the reference anyway).
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCES = {
    "rocketstore.store.log._record_c": "src/rocketstore/store/log/_record_c.pyx",
    "rocketstore.store._java_hash_c": "src/rocketstore/store/_java_hash_c.pyx",
    "rocketstore.store.read._raw_read_c": "src/rocketstore/store/read/_raw_read_c.pyx",
    "rocketstore.store.queue._unit_write_c": "src/rocketstore/store/queue/_unit_write_c.pyx",
    "rocketstore.store.queue._index_write_c": "src/rocketstore/store/queue/_index_write_c.pyx",
}


class OptionalBuildExt(build_ext):
    """build_ext that installs the package without its compiled core when compiling fails."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers: the pure-Python package still works
            self._skip(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._skip(exc, ext.name)

    @staticmethod
    def _skip(exc: Exception, name: str = "the compiled core") -> None:
        print(
            f"rocketstore: could not build {name} ({exc}); installing the pure-Python code",
            file=sys.stderr,
        )


def extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print(
            "rocketstore: Cython is not available; installing the pure-Python code", file=sys.stderr
        )
        return []
    exts = [Extension(name, [src], optional=True) for name, src in SOURCES.items()]
    return cythonize(exts, compiler_directives={"language_level": "3"}, quiet=True)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
