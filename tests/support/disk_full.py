"""`rocketstore serve` in a child process on loopback ports, and the sends and pulls the
disk-full and many-queue tests make through it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

CLI = [sys.executable, "-m", "rocketstore.cli"]


class Server:
    """`rocketstore serve` on loopback ports; every wait bounded, killed on exit. ``out``
    holds what it printed so far (``expect`` reads on)."""

    def __init__(
        self,
        store: Path,
        conf: Path,
        *extra: str,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        args = ["serve", "--store", str(store), "-c", str(conf), "--namesrv-listen"]
        args += ["127.0.0.1:0", "--listen", "127.0.0.1:0", "--grpc-listen", "", *extra]
        self.proc = subprocess.Popen(
            [*CLI, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(os.environ),
            preexec_fn=preexec_fn,
        )
        self.out = b""
        self.address = self.expect(rb"broker broker-a .* listening on (127\.0\.0\.1:\d+)")

    def expect(self, pattern: bytes, timeout: float = 60.0) -> str:
        """The first group of ``pattern`` in what the server printed, read until it shows;
        AssertionError (with what it printed) when the server ends or the time is up first."""
        import select
        import time

        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.out)
            if m:
                return m.group(1).decode() if m.groups() else m.group(0).decode()
            if time.monotonic() > deadline:
                break
            if select.select([fd], [], [], 0.1)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self.out += chunk
        self.proc.kill()
        _out, err = self.proc.communicate(timeout=30)
        raise AssertionError(
            f"serve did not print {pattern!r} (exit {self.proc.returncode}): {self.out!r}\n"
            f"{err[-3000:]!r}"
        )

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)

    def stderr(self) -> str:
        """What the server wrote to standard error (once it has ended)."""
        assert self.proc.stderr is not None and self.proc.poll() is not None
        return self.proc.stderr.read().decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def send_messages(
    client: object, address: str, topic: str, qid: int, body: bytes, properties: str = ""
) -> object:
    import time

    from rocketstore.remoting import RemotingCommand

    fields = {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(qid),
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": properties,
        "reconsumeTimes": "0",
        "unitMode": "false",
    }
    return client.invoke(address, RemotingCommand.request(10, fields, body))  # type: ignore[attr-defined]


def pull_bodies(client: object, address: str, topic: str, qid: int, offset: int) -> list[bytes]:
    from rocketstore.remoting import RemotingCommand
    from rocketstore.store.log._record import decode_message

    req = RemotingCommand.request(
        11,
        {
            "consumerGroup": "CG",
            "topic": topic,
            "queueId": str(qid),
            "queueOffset": str(offset),
            "maxMsgNums": "32",
            "sysFlag": "4",
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": "*",
            "subVersion": "0",
        },
    )
    r = client.invoke(address, req)  # type: ignore[attr-defined]
    if r.code != 0 or not r.body:
        return []
    out: list[bytes] = []
    pos = 0
    body = bytes(r.body)
    while pos < len(body):
        m = decode_message(body, pos, len(body), check_crc=False)
        out.append(m.body)
        pos += m.store_size
    return out
