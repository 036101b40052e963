"""Clients that pipeline requests for large answers and never read them, against `rocketstore
serve`: the server's memory (its RSS, sampled) and how a bystander client is served meanwhile.

    python benchmarks/pipelined_answers.py [--connections 200] [--pipeline 40]
        [--body-kib 1024] [--seconds 24] [--rss-limit-mib 8192]

``rocketstore serve`` runs in a subprocess (a temporary store, ports chosen at start, gRPC,
console and metrics off). One message of ``--body-kib`` KiB is sent; then ``--connections``
connections (a 4 KiB receive buffer each) each send ``--pipeline`` VIEW_MESSAGE_BY_ID requests
for it at once and never read. For ``--seconds`` a bystander on its own connection asks, in
turn, GET_MAX_OFFSET (a small answer) and VIEW_MESSAGE_BY_ID of the same message (a large one,
read in full), and the server's RSS is sampled every 50 ms. Then the non-readers close and the
RSS is sampled again ``--settle`` seconds later (what the server gives back).

Prints the RSS before, at its peak and after, how many non-reader connections the server
closed, and the bystander's answers (count, failures, median / 99th percentile / max latency of
each kind). A run whose RSS passes ``--rss-limit-mib`` is stopped there (the server killed) and
says so.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from rocketstore.remoting import RemotingClient, RemotingCommand

MiB = 1024 * 1024


def rss(pid: int) -> int:
    """Resident set size of process ``pid`` in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """The peak RSS of a process, sampled every 50 ms; kills it past ``limit`` bytes."""

    def __init__(self, proc: subprocess.Popen[str], limit: int) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.limit = limit
        self.peak = 0
        self.over_limit_after: float | None = None
        self._halt = threading.Event()
        self._t0 = time.perf_counter()

    def run(self) -> None:
        while not self._halt.wait(0.05):
            now = rss(self.proc.pid)
            self.peak = max(self.peak, now)
            if now > self.limit and self.over_limit_after is None:
                self.over_limit_after = time.perf_counter() - self._t0
                self.proc.kill()

    def stop(self) -> int:
        self._halt.set()
        self.join()
        return self.peak


def send_request(body: bytes) -> RemotingCommand:
    fields = {
        "producerGroup": "PG",
        "topic": "Big",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": "",
        "reconsumeTimes": "0",
        "unitMode": "false",
    }
    return RemotingCommand.request(10, fields, body)


def start_serve(tmp: str) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "rocketstore.cli", "serve", "--store", f"{tmp}/store"),
            *("--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"),
            *("--grpc-listen", "", "--metrics-listen", "", "--console-listen", ""),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert server.stdout is not None
    for line in server.stdout:
        m = re.search(r"broker .* listening on (\S+),", line)
        if m:
            return server, m.group(1)
    raise SystemExit("the server did not start")


def non_reader(host: str, port: int, burst: bytes) -> socket.socket | None:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    try:
        sock.connect((host, port))
        sock.sendall(burst)
    except OSError:
        sock.close()
        return None
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed (or reset) this connection: its answers unread, the
    closing shows once the socket's receive buffer is drained."""
    sock.setblocking(False)
    try:
        while True:
            data = sock.recv(1 << 20)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def summary(name: str, times: list[float], failed: int) -> str:
    if not times:
        return f"{name}: none answered, {failed} failed"
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{name}: {len(times)} answered, {failed} failed; median "
        f"{statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, max "
        f"{ordered[-1] * 1000:.1f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--pipeline", type=int, default=40)
    ap.add_argument("--body-kib", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=24.0)
    ap.add_argument("--settle", type=float, default=10.0)
    ap.add_argument("--rss-limit-mib", type=int, default=8192)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocketstore-pipelined-") as tmp:
        server, address = start_serve(tmp)
        host, port_text = address.rsplit(":", 1)
        port = int(port_text)
        sampler: Sampler | None = None
        socks: list[socket.socket] = []
        try:
            with RemotingClient(timeout=30) as client:
                sent = client.invoke(address, send_request(os.urandom(args.body_kib * 1024)))
                assert sent.code == 0, sent.remark
                phys = int(sent.ext_fields["msgId"][-16:], 16)
                view = RemotingCommand.request(33, {"offset": str(phys)})
                answer = client.invoke(address, view)
                assert answer.code == 0 and len(answer.body) > args.body_kib * 1024
                time.sleep(1.0)
                before = rss(server.pid)
                sampler = Sampler(server, args.rss_limit_mib * MiB)
                sampler.start()
                burst = b"".join(
                    RemotingCommand.request(33, {"offset": str(phys)}).encode()
                    for _ in range(args.pipeline)
                )
                for _ in range(args.connections):
                    sock = non_reader(host, port, burst)
                    if sock is not None:
                        socks.append(sock)
                small: list[float] = []
                large: list[float] = []
                small_failed = large_failed = 0
                started = time.perf_counter()
                while time.perf_counter() - started < args.seconds and server.poll() is None:
                    for kind in (0, 1):
                        t0 = time.perf_counter()
                        try:
                            if kind == 0:
                                cmd = RemotingCommand.request(30, {"topic": "Big", "queueId": "0"})
                                ok = client.invoke(address, cmd).code == 0
                            else:
                                r = client.invoke(address, view)
                                ok = r.code == 0 and len(r.body) == len(answer.body)
                        except Exception:
                            ok = False
                        took = time.perf_counter() - t0
                        if ok:
                            (small if kind == 0 else large).append(took)
                        elif kind == 0:
                            small_failed += 1
                        else:
                            large_failed += 1
                    time.sleep(0.05)
            closed = sum(closed_by_server(s) for s in socks)
            peak = sampler.stop()
            sampler_over = sampler.over_limit_after
            for sock in socks:
                sock.close()
            socks = []
            time.sleep(args.settle)
            after = rss(server.pid)
        finally:
            for sock in socks:
                sock.close()
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(10)
            if sampler is not None and sampler.is_alive():
                sampler.stop()
    print(
        f"{args.connections} connections x {args.pipeline} pipelined VIEW_MESSAGE_BY_ID of a "
        f"{args.body_kib} KiB message, never read, for {args.seconds:g} s"
    )
    if sampler_over is not None:
        print(f"the server passed {args.rss_limit_mib} MiB of RSS after {sampler_over:.1f} s")
    print(
        f"server RSS: {before / MiB:.0f} MiB before, {peak / MiB:.0f} MiB at the peak, "
        f"{after / MiB:.0f} MiB {args.settle:g} s after the non-readers closed"
    )
    print(f"non-reader connections the server closed: {closed} of {args.connections}")
    print("bystander " + summary("GET_MAX_OFFSET", small, small_failed))
    print("bystander " + summary(f"VIEW_MESSAGE_BY_ID ({args.body_kib} KiB)", large, large_failed))


if __name__ == "__main__":
    main()
