"""Seeded crash points of the exactly-once writes, for the tests that kill a query there.

``ROCKETSTORE_SPARK_CRASH=<point>:<batch>`` and ``ROCKETSTORE_SPARK_CRASH_FILE=<path>``: when
the write of micro-batch ``<batch>`` reaches ``<point>``, the process writes its pid into the
file and waits to be killed (kill -9 by the test). The points:

    task         partition 0's task sent the halves of its first Arrow batch
    precommit    every task is done, the decision is not written
    mid_end      half of the batch's halves are committed
    postcommit   every half is committed, Spark has not checkpointed the batch
    store_task   partition 0's task into a store path stored its first Arrow batch

Nothing happens when the variables are not set.
"""

from __future__ import annotations

import os
import time

_ENV = "ROCKETSTORE_SPARK_CRASH"
_FILE_ENV = "ROCKETSTORE_SPARK_CRASH_FILE"


def reach(point: str, batch: int) -> None:
    """Stop here for good when the crash point ``point`` of ``batch`` is set."""
    wanted = os.environ.get(_ENV)
    if not wanted or wanted != f"{point}:{batch}":
        return
    path = os.environ.get(_FILE_ENV)
    if not path:
        return
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()} {point} {batch}\n")
    os.replace(tmp, path)
    while True:  # the test kills the process group
        time.sleep(1.0)
