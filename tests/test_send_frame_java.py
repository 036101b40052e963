"""RocketMQ 4.9.8's own benchmark producer (binary headers, SEND_MESSAGE_V2 with the broker's
name, keys on) against ``rocketstore serve`` with its defaults, whose send frame path serves
such sends: every send is answered as sent, and RocketMQ's push consumer gets every message
back.

Skipped without ``ROCKETMQ_CLASSPATH`` (see tests/support/rocketmq_java.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from support import rocketmq_java as rj
from support.interop import ServerProcess

pytestmark = pytest.mark.skipif(rj.unavailable() is not None, reason=str(rj.unavailable()))

TOPIC = "FramePathJava"
SENDS = 400
# the producer's last line; a run longer than its 1 s statistics tick (a busy machine) puts its
# rate and round trips between the totals and the failures
_COMPLETE = re.compile(
    r"\[Complete\] Send Total: (\d+) (?:.*? )?Send Failed: (\d+) Response Failed: (\d+)"
)


def test_rocketmqs_benchmark_producer_is_served_and_consumed(tmp_path: Path) -> None:
    server = ServerProcess.serve(tmp_path / "store", tmp_path / "serve.log")
    runner = None
    try:
        assert server.namesrv is not None
        runner = rj.AdminRunner(tmp_path / "runner")
        made = runner.admin(
            "updateTopic", "-n", server.namesrv, "-c", "DefaultCluster", "-t", TOPIC, "-w", "4"
        )
        assert "success" in made.out, made.out + made.err
        producer = rj.java_command(
            tmp_path,
            "org.apache.rocketmq.example.benchmark.Producer",
            *("-n", server.namesrv, "-t", TOPIC, "-w", "4", "-s", "512", "-k", "true"),
            *("-q", str(SENDS)),
        )
        done = subprocess.run(
            producer,
            capture_output=True,
            text=True,
            timeout=120,
            env=rj.java_env(tmp_path),
            stdin=subprocess.DEVNULL,
            check=False,
        )
        totals = _COMPLETE.findall(done.stdout)
        assert totals, done.stdout[-2000:] + done.stderr[-2000:]
        total, failed, response_failed = map(int, totals[-1])
        assert (total, failed, response_failed) == (SENDS, 0, 0)
        assert runner.consume(server.namesrv, "frame_path_group", TOPIC, SENDS) == SENDS
    finally:
        if runner is not None:
            runner.close()
        server.stop()
