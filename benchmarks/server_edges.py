"""What a hostile client costs a server (a decompression bomb, a flood of malformed requests),
and the disk a fresh store holds.

    python benchmarks/server_edges.py [--what bomb|flood|disk|all] [--inflates-to MiB]
        [--seconds S]

``bomb``: a compressed REGISTER_BROKER body of about 1 MB that inflates to ``--inflates-to``
MiB (1024 by default) sent to an in-process name server; prints the answer, how long it took
and how much the process's peak memory grew (the name server stops inflating at its limit).

``flood``: ``rocketstore serve`` in a subprocess (a temporary store, ports chosen at start);
for ``--seconds`` one connection pipelines malformed SEND_MESSAGE, UPDATE_CONSUMER_OFFSET,
QUERY_CONSUMER_OFFSET and CONSUMER_SEND_MSG_BACK requests in rounds of 1,000 and reads every
answer; prints the requests sent, how many were answered with an error, and the bytes, lines and
tracebacks the server wrote to its log (stderr).

``disk``: a store with the default settings (1 GiB commit-log files) in a temporary directory,
one message put, the store closed: the disk blocks its files hold against their sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

from rocketstore.namesrv import NameServer
from rocketstore.protocol._namesrv_bodies import DataVersion, RegisterBrokerBody, TopicConfigWrapper
from rocketstore.remoting import RemotingClient, RemotingCommand
from rocketstore.remoting._command import decode_frame

MiB = 1024 * 1024
HUGE = str(1 << 70)  # outside Java's long


def bomb_body(inflated: int) -> bytes:
    """A RegisterBrokerBody followed by zeros, deflated without holding the zeros."""
    table = {"Bomb": {"topicName": "Bomb", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}
    raw = zlib.decompress(
        RegisterBrokerBody(TopicConfigWrapper(DataVersion(1, 1), table)).encode(compressed=True)
    )
    c = zlib.compressobj(9)
    out = [c.compress(raw)]
    chunk = bytes(MiB)
    out += [c.compress(chunk) for _ in range(inflated // MiB)]
    out.append(c.flush())
    return b"".join(out)


def bomb(inflates_to_mib: int) -> None:
    body = bomb_body(inflates_to_mib * MiB)
    ext = {
        "brokerName": "b",
        "brokerAddr": "127.0.0.1:10912",
        "clusterName": "C",
        "haServerAddr": "127.0.0.1:2",
        "brokerId": "0",
        "compressed": "true",
        "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
    }

    async def main() -> None:
        async with NameServer(port=0) as ns:
            with RemotingClient(timeout=60) as client:
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                started = time.perf_counter()
                answer = await asyncio.to_thread(
                    client.invoke, ns.address, RemotingCommand.request(103, ext, body)
                )
                took = time.perf_counter() - started
                grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) // 1024
        print(
            f"bomb: {len(body):,} bytes inflating to {inflates_to_mib} MiB: answered "
            f"{answer.code} ({answer.remark}) in {took:.3f} s; peak memory grew {grew} MiB"
        )

    asyncio.run(main())


def malformed() -> list[RemotingCommand]:
    send = {"producerGroup": "P", "topic": "T", "defaultTopic": "TBW102", "queueId": "0"}
    send |= {"defaultTopicQueueNums": "4", "sysFlag": "0", "bornTimestamp": "1", "flag": "0"}
    offset = {"topic": "T", "queueId": "0", "consumerGroup": "G", "commitOffset": "1"}
    return [
        RemotingCommand.request(10, {**send, "sysFlag": "x"}, b"x"),
        RemotingCommand.request(10, {**send, "bornTimestamp": HUGE}, b"x"),
        RemotingCommand.request(15, {**offset, "commitOffset": "x"}),
        RemotingCommand.request(15, {**offset, "queueId": HUGE}),
        RemotingCommand.request(14, {**offset, "queueId": "x"}),
        RemotingCommand.request(36, {"group": "G", "offset": HUGE}),
        RemotingCommand.request(36, {"offset": "0"}),
    ]


def _read_frame(sock: socket.socket) -> RemotingCommand:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            part = sock.recv(n - len(data))
            if not part:
                raise ConnectionError("the server closed the connection")
            data += part
        return data

    (length,) = struct.unpack(">i", exactly(4))
    return decode_frame(exactly(length))


def flood(seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="rocketstore-edges-") as tmp:
        log_path = os.path.join(tmp, "serve.log")
        with open(log_path, "wb") as log:
            server = subprocess.Popen(
                [
                    *(sys.executable, "-m", "rocketstore.cli", "serve", "--store", f"{tmp}/store"),
                    *("--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"),
                    *("--grpc-listen", ""),
                ],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        try:
            assert server.stdout is not None
            address = None
            for line in server.stdout:
                m = re.search(r"broker .* listening on (\S+),", line)
                if m:
                    address = m.group(1)
                    break
            if address is None:
                raise SystemExit("the server did not start: see its log")
            host, port = address.rsplit(":", 1)
            kinds = malformed()
            sent = errors = 0
            started = time.perf_counter()
            with socket.create_connection((host, int(port)), timeout=30) as sock:
                while time.perf_counter() - started < seconds:
                    batch = []
                    for i in range(1000):
                        cmd = kinds[i % len(kinds)]
                        cmd.opaque = sent + i + 1
                        batch.append(cmd.encode())
                    sender = threading.Thread(target=sock.sendall, args=(b"".join(batch),))
                    sender.start()
                    for _ in batch:
                        errors += _read_frame(sock).code != 0
                    sender.join()
                    sent += len(batch)
            took = time.perf_counter() - started
        finally:
            server.terminate()
            server.wait(30)
        with open(log_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    print(
        f"flood: {sent:,} malformed requests in {took:.1f} s, {errors:,} answered with an error; "
        f"the server's log: {len(text.encode()):,} bytes, {text.count(chr(10))} lines, "
        f"{text.count('Traceback')} tracebacks"
    )


def _held(root: str) -> tuple[int, int]:
    held = size = 0
    for path, _dirs, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(path, name))
            held += st.st_blocks * 512
            size += st.st_size
    return held, size


def disk() -> None:
    from rocketstore import Message, MessageStore, StoreConfig

    with tempfile.TemporaryDirectory(prefix="rocketstore-disk-") as tmp:
        with MessageStore(StoreConfig(store_path_root_dir=tmp)) as store:
            assert store.put_message(Message("T", b"x" * 1024, 0, keys=["k"])).ok
            time.sleep(2.0)  # the allocation service makes the next file meanwhile
            running = _held(tmp)
        closed = _held(tmp)
    for when, (held, size) in (("open", running), ("closed", closed)):
        print(
            f"disk: one message in a default store, {when}: {held / MiB:,.1f} MiB held "
            f"(files {size / MiB:,.0f} MiB)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=("bomb", "flood", "disk", "all"), default="all")
    ap.add_argument("--inflates-to", type=int, default=1024, help="MiB the bomb inflates to")
    ap.add_argument("--seconds", type=float, default=6.0, help="how long the flood lasts")
    args = ap.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.what in ("bomb", "all"):
        bomb(args.inflates_to)
    if args.what in ("flood", "all"):
        flood(args.seconds)
    if args.what in ("disk", "all"):
        disk()


if __name__ == "__main__":
    main()
