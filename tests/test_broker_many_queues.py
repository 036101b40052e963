"""The real broker with more queues than its open-file limit allows mapped files: `rocketstore
serve` in a child whose RLIMIT_NOFILE is low acknowledges one send to each of its queues,
serves every one of them back, and does so again after a restart under the same limit. And a
send refused because the store ran out of descriptors is answered with that cause, not with
RocketMQ's disk-full wording."""

from __future__ import annotations

import errno
import os
import resource
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.broker import RunningBroker, send_request
from support.disk_full import Server, pull_bodies, send_messages
from support.waits import WAIT_S

LIMIT = 256  # open files of the broker's process, soft and hard
TOPICS = 150  # x 4 queues: 600 queues, each with its own consume-queue file
QUEUES = 4
BROKER_CONF = """\
mappedFileSizeCommitLog=1048576
mappedFileSizeConsumeQueue=2000
maxHashSlotNum=64
maxIndexNum=400
maxMappedQueueFiles=64
"""


def _low_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def _body(topic: int, qid: int, n: int) -> bytes:
    return b"t%d-q%d-n%d" % (topic, qid, n)


def _send_to_every_queue(server: Server, n: int) -> list[str]:
    from rocketstore.remoting import RemotingClient

    refused = []
    with RemotingClient(timeout=30.0) as client:
        for t in range(TOPICS):
            for qid in range(QUEUES):
                r: Any = send_messages(client, server.address, f"Many{t}", qid, _body(t, qid, n))
                if r.code != 0:
                    refused.append(f"Many{t}/{qid}: {r.code} {r.remark}")
    return refused


def _read_every_queue(server: Server, n: int) -> list[str]:
    from rocketstore.remoting import RemotingClient

    wrong = []
    with RemotingClient(timeout=30.0) as client:
        for t in range(TOPICS):
            for qid in range(QUEUES):
                want = [_body(t, qid, i) for i in range(n + 1)]
                deadline = time.monotonic() + WAIT_S
                while True:  # dispatch may be a little behind the acknowledgement
                    got = pull_bodies(client, server.address, f"Many{t}", qid, 0)
                    if len(got) >= len(want) or time.monotonic() > deadline:
                        break
                if got != want:
                    wrong.append(f"Many{t}/{qid}: {got[:3]}")
    return wrong


def test_serve_under_a_low_open_file_limit_serves_every_queue_across_a_restart(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(BROKER_CONF)
    store = tmp_path / "store"
    for n in range(2):  # the second round opens the store again under the same limit
        server = Server(store, conf, preexec_fn=_low_limit)
        try:
            assert _send_to_every_queue(server, n) == []
            assert _read_every_queue(server, n) == []
            assert server.proc.poll() is None
            assert server.stop(signal.SIGTERM) == 0
        finally:
            server.close()
    queue_files = list((store / "consumequeue").glob("Many*/*/*"))
    assert len(queue_files) == TOPICS * QUEUES


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    running = RunningBroker(tmp_path / "b", store={}, broker={})
    try:
        yield running
    finally:
        running.stop()


def test_a_send_refused_for_open_files_says_so(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocketstore.remoting import RemotingClient
    from rocketstore.store._disk import WRITE_FAILED_PREFIX

    real_open: Callable[..., int] = os.open

    def open_(path: Any, *args: Any, **kwargs: Any) -> int:
        if "consumequeue" in str(path) and "Emfile" in str(path):
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), str(path))
        return real_open(path, *args, **kwargs)

    with RemotingClient(timeout=30.0) as client:
        assert client.invoke(broker.addr, send_request("Before")).code == 0
        monkeypatch.setattr(os, "open", open_)
        # stored; its queue's first file cannot be opened, so dispatch stops and the store
        # refuses writes until it works again
        assert client.invoke(broker.addr, send_request("Emfile")).code == 0
        deadline = time.monotonic() + WAIT_S
        while (r := client.invoke(broker.addr, send_request("Before"))).code == 0:
            assert time.monotonic() < deadline, "no send was refused"
        assert r.code == 14 and r.remark is not None
        assert r.remark.startswith(WRITE_FAILED_PREFIX + "too many open files"), r.remark
        assert "disk is full" not in r.remark
        monkeypatch.undo()
        # descriptors again: sends are acknowledged
        deadline = time.monotonic() + WAIT_S
        while client.invoke(broker.addr, send_request("Emfile")).code != 0:
            assert time.monotonic() < deadline, "sends stayed refused"
