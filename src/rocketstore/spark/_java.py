"""The Java that Spark will run, checked before Spark starts: Spark 4 needs Java 17 or newer.

Spark's launcher takes ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` on PATH;
without one it stops with ``JAVA_HOME is not set``, and with an old one the JVM exits before
PySpark can reach it (``JAVA_GATEWAY_EXITED``). ``check_java`` finds the same java, asks it its
version and raises JavaMissingError with one line saying what to do.

Pure Python (no pyspark); called from the thread that is about to start Spark.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping

from ..store._errors import StoreError

MINIMUM = 17
INSTALL = "apt-get install openjdk-17-jre-headless, or any Java 17+"
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?[^"]*"')


class JavaMissingError(StoreError):
    """No Java that Spark can run: none found, or one older than Java 17."""


def find_java(environ: Mapping[str, str] | None = None) -> str:
    """The java Spark's launcher would run (JAVA_HOME's, else PATH's); JavaMissingError when
    there is none."""
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise JavaMissingError(
                f"Spark needs Java {MINIMUM}+: JAVA_HOME is {home}, which has no bin/java "
                f"(point JAVA_HOME at a Java {MINIMUM}+ installation, or unset it to use "
                "java on PATH)"
            )
        return java
    found = shutil.which("java", path=env.get("PATH"))
    if found is None:
        raise JavaMissingError(
            f"Spark needs Java {MINIMUM}+, and there is no java on PATH and no JAVA_HOME "
            f"({INSTALL}; or leave out --spark: export and import run without Java)"
        )
    return found


def java_version(java: str, timeout_s: float = 60.0) -> int:
    """The feature version of ``java`` (8 for 1.8.0_x, 17 for 17.0.x); JavaMissingError when
    it does not answer like a JVM."""
    try:
        done = subprocess.run(
            [java, "-version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaMissingError(f"Spark needs Java {MINIMUM}+; {java} did not run: {exc}") from None
    match = _VERSION.search(done.stderr + done.stdout)
    if match is None:
        raise JavaMissingError(
            f"Spark needs Java {MINIMUM}+; {java} -version did not say its version"
            f" (exit status {done.returncode})"
        )
    major, minor = int(match.group(1)), int(match.group(2) or 0)
    return minor if major == 1 else major


def check_java(environ: Mapping[str, str] | None = None) -> str:
    """The java Spark will run, after checking that it is Java 17 or newer."""
    java = find_java(environ)
    version = java_version(java)
    if version < MINIMUM:
        raise JavaMissingError(
            f"Spark needs Java {MINIMUM}+, and {java} is Java {version} ({INSTALL}, then put "
            "it first on PATH or set JAVA_HOME to it)"
        )
    return java
