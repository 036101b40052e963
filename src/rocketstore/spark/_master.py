"""Whether ``rocketstore export`` / ``import`` run Spark, and on which master.

Without Spark the jobs read and write with pyarrow in the calling process (``_local_export``,
``_local_import``): a store on one machine needs no JVM to become Parquet. Spark runs when

- the command says so: ``--spark`` (local[2] unless a master is configured) or ``--master URL``;
- the user's Spark settings name a master that is not local: the environment variable
  SPARK_MASTER, or ``spark.master`` in ``spark-defaults.conf`` (under SPARK_CONF_DIR, else
  ``$SPARK_HOME/conf``).

A configured ``local`` master (``local``, ``local[4]``, ``local-cluster[...]``) is no reason to
start a JVM: the jobs run without it unless ``--spark`` is given.

Pure Python (no pyspark); any thread.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

DEFAULT_MASTER = "local[2]"


def defaults_file(environ: Mapping[str, str]) -> Path | None:
    """The spark-defaults.conf Spark's launcher reads, when there is one."""
    conf_dir = environ.get("SPARK_CONF_DIR")
    if not conf_dir and environ.get("SPARK_HOME"):
        conf_dir = os.path.join(environ["SPARK_HOME"], "conf")
    if not conf_dir:
        return None
    path = Path(conf_dir) / "spark-defaults.conf"
    return path if path.is_file() else None


def defaults_master(path: Path) -> str | None:
    """``spark.master`` of a spark-defaults.conf (``key value`` or ``key=value`` lines, ``#``
    comments), or None."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    master = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.replace("=", " ", 1).partition(" ")
        if key.strip() == "spark.master" and value.strip():
            master = value.strip()
    return master


def is_local(master: str) -> bool:
    return master.strip().lower().startswith("local")


def choose(spark: bool, master: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The master to run Spark on for ``--spark`` / ``--master`` and the environment, or None
    when the job runs without Spark."""
    env = os.environ if environ is None else environ
    if master:
        return master
    configured = env.get("SPARK_MASTER") or None
    if configured is None:
        path = defaults_file(env)
        configured = defaults_master(path) if path is not None else None
    if configured is not None and (spark or not is_local(configured)):
        return configured
    return DEFAULT_MASTER if spark else None
