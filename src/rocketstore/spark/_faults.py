"""Seeded crash points of the exactly-once writes, for the tests that kill a query there.

``ROCKETSTORE_SPARK_CRASH=<point>:<batch>`` and ``ROCKETSTORE_SPARK_CRASH_FILE=<path>``: when
the write of micro-batch ``<batch>`` reaches ``<point>``, the process writes its pid into the
file and waits to be killed (kill -9 by the test). ``ROCKETSTORE_SPARK_HOLD=<point>:<batch>``
(same file) holds there instead until the test removes the file, then goes on: the test does
something to the cluster meanwhile (kills a broker). The points:

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
_HOLD_ENV = "ROCKETSTORE_SPARK_HOLD"
_FILE_ENV = "ROCKETSTORE_SPARK_CRASH_FILE"


def reach(point: str, batch: int) -> None:
    """Stop here for good when the crash point ``point`` of ``batch`` is set; hold here until
    the file is removed when it is the hold point."""
    here = f"{point}:{batch}"
    crash = os.environ.get(_ENV) == here
    if not crash and os.environ.get(_HOLD_ENV) != here:
        return
    path = os.environ.get(_FILE_ENV)
    if not path:
        return
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(f"{os.getpid()} {point} {batch}\n")
    os.replace(tmp, path)
    while crash or os.path.exists(path):  # killed by the test, or let go
        time.sleep(0.2)
