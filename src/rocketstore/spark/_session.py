"""The SparkSession that ``rocketstore export`` / ``import --spark`` run on: Java checked first,
the chosen master, and Spark's log in a file instead of the terminal.

Spark's JVM writes its log (log4j2) and anything else it prints to standard error; started from
the command line it would cover the terminal with WARN lines and stage progress bars. Here the
JVM is launched with its standard output and error going to ``spark.log`` in the log directory,
log4j2 set up by ``spark-log4j2.properties`` there (everything at INFO and above to standard
error, i.e. into that file), and Spark's console progress bar off. The Python workers the JVM
starts inherit its standard error: what they print lands in the same file. ``spark.log`` is moved
to ``spark.log.1`` at start once it passed ROLL_BYTES.

A session already running in the process (a notebook's, a test's) is used as it is.

Called from the command's thread; imports pyspark.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ..store._errors import StoreError
from ._java import check_java
from ._master import is_local

SPARK_LOG = "spark.log"
LOG4J2_FILE = "spark-log4j2.properties"
ROLL_BYTES = 64 << 20

LOG4J2 = """\
# written by rocketstore export / import --spark: Spark's log goes to standard error, which the
# command sends to spark.log beside this file
rootLogger.level = info
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# (pyspark counts as Spark's shell, which filters its console log below this logger's level)
logger.repl.name = org.apache.spark.api.python.PythonGatewayServer
logger.repl.level = info
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = warn
"""


class SparkStartError(StoreError):
    """Spark's JVM did not start (its reason is in the Spark log named)."""


def prepare_log(directory: Path) -> tuple[Path, Path]:
    """(spark.log, the log4j2 properties file) in ``directory``, made if missing; an old
    spark.log past ROLL_BYTES is moved aside first."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / SPARK_LOG
    if log.is_file() and log.stat().st_size >= ROLL_BYTES:
        os.replace(log, directory / (SPARK_LOG + ".1"))
    props = directory / LOG4J2_FILE
    if not props.is_file() or props.read_text(encoding="utf-8") != LOG4J2:
        props.write_text(LOG4J2, encoding="utf-8")
    return log, props


def session_conf(master: str, log4j2: Path) -> dict[str, str]:
    """The settings of the command's session (a local master binds and advertises 127.0.0.1;
    a cluster's executors must reach the driver at the address Spark picks)."""
    conf = {
        "spark.master": master,
        "spark.app.name": "rocketstore",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j2.as_uri()}",
    }
    if is_local(master):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    return conf


def cli_session(master: str, log_dir: Path) -> tuple[Any, bool]:
    """(session, whether it was started here): a running session is reused, not stopped.
    JavaMissingError before anything starts when there is no Java 17+; SparkStartError when
    the JVM exits at start."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    check_java()
    log, props = prepare_log(log_dir)
    # the executors' Python: this interpreter (where rocketstore is installed) unless told
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = SparkConf()
    for key, value in session_conf(master, props).items():
        conf.set(key, value)
    if SparkContext._gateway is None:
        from pyspark.java_gateway import launch_gateway

        with log.open("ab") as out:
            try:
                gateway = launch_gateway(  # type: ignore[no-untyped-call]
                    conf, popen_kwargs={"stdout": out, "stderr": out}
                )
            except Exception as exc:
                raise SparkStartError(
                    f"Spark did not start ({type(exc).__name__}); its log: {log}"
                ) from None
        SparkContext(conf=conf, gateway=gateway)
    else:
        SparkContext(conf=conf)
    return SparkSession.builder.getOrCreate(), True
