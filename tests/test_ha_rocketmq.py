"""Replication against a real RocketMQ 4.9.8 store, both ways: a rocketstore slave of a
RocketMQ master and a RocketMQ slave of a rocketstore master, compared byte for byte.

The RocketMQ side is RocketMQ's own DefaultMessageStore (with its HAService, HAConnection and
HAClient) in a JVM, driven by a small harness written here (``HA_NODE``). It needs RocketMQ's
classes, which this project does not ship: set ``ROCKETMQ_HA_CLASSPATH`` to a classpath with
RocketMQ 4.9.8's logging, remoting, common and store classes and their dependencies (netty,
commons-lang3, commons-validator, jna, slf4j, logback, gson, lz4, zstd-jni, guava, and a
fastjson). How it was built here: the four modules' sources at tag rocketmq-all-4.9.8, the
DLedger commit log left out (DefaultMessageStore then builds the plain CommitLog), Debian's
jars for the dependencies, and in place of fastjson (not packaged by Debian) a few classes over
gson with the methods the store calls. Without the variable, or without ``javac``, the tests are
skipped.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, PutMessageStatus, StoreConfig
from support.ports import free_port
from support.waits import wait_dispatched, wait_until

CLASSPATH = os.environ.get("ROCKETMQ_HA_CLASSPATH", "")
pytestmark = pytest.mark.skipif(
    not CLASSPATH or shutil.which("javac") is None,
    reason="set ROCKETMQ_HA_CLASSPATH to RocketMQ 4.9.8's store classes (see the module)",
)

FILE = 64 * 1024
_STATUS = re.compile(r"[A-Z_]+")
JAVA_OPTS = [
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
]

# The harness: a RocketMQ DefaultMessageStore in the given role. Args: root, role, HA port,
# master HA address ("-" for none), commit-log file size. Commands on stdin: "put N" (prints
# each put's status), "max" (prints the max physical offset), "quit".
HA_NODE = r"""
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.BrokerRole;
import org.apache.rocketmq.store.config.FlushDiskType;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

public class HaNode {
    public static void main(String[] args) throws Exception {
        String root = args[0];
        MessageStoreConfig c = new MessageStoreConfig();
        c.setStorePathRootDir(root);
        c.setStorePathCommitLog(root + "/commitlog");
        c.setMappedFileSizeCommitLog(Integer.parseInt(args[4]));
        c.setMappedFileSizeConsumeQueue(20 * 1000);
        c.setBrokerRole(BrokerRole.valueOf(args[1]));
        c.setHaListenPort(Integer.parseInt(args[2]));
        c.setFlushDiskType(FlushDiskType.ASYNC_FLUSH);
        c.setHaSendHeartbeatInterval(500);
        c.setSyncFlushTimeout(3000);
        c.setMaxHashSlotNum(1000);
        c.setMaxIndexNum(4000);
        DefaultMessageStore s = new DefaultMessageStore(
            c, new BrokerStatsManager("HaTest", true), null, new BrokerConfig());
        if (!s.load()) throw new RuntimeException("load failed");
        s.start();
        if (!args[3].equals("-")) s.updateHaMasterAddress(args[3]);
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        int seq = 0;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split(" ");
            if (w[0].equals("put")) {
                int n = Integer.parseInt(w[1]);
                for (int i = 0; i < n; i++, seq++) {
                    MessageExtBrokerInner m = new MessageExtBrokerInner();
                    m.setTopic("T");
                    m.setQueueId(seq % 3);
                    StringBuilder b = new StringBuilder();
                    for (int k = 0; k <= seq % 40; k++) b.append("rmq-").append(seq).append('|');
                    m.setBody(b.toString().getBytes("UTF-8"));
                    m.setTags("t" + (seq % 2));
                    m.setKeys("k" + seq);
                    m.setBornTimestamp(System.currentTimeMillis());
                    m.setBornHost(new InetSocketAddress("127.0.0.1", 1234));
                    m.setStoreHost(new InetSocketAddress("127.0.0.1", 10911));
                    m.setPropertiesString(MessageDecoder.messageProperties2String(m.getProperties()));
                    PutMessageResult r = s.putMessage(m);
                    System.out.println(r.getPutMessageStatus());
                }
            } else if (w[0].equals("max")) {
                System.out.println(s.getMaxPhyOffset());
            } else if (w[0].equals("quit")) {
                break;
            }
            System.out.flush();
        }
        s.shutdown();
        System.out.println("bye");
        System.out.flush();
    }
}
"""


def rmq_body(seq: int) -> bytes:
    return ("".join(f"rmq-{seq}|" for _ in range(seq % 40 + 1))).encode()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The harness compiled against ROCKETMQ_HA_CLASSPATH; returns the classpath to run."""
    d = tmp_path_factory.mktemp("hanode")
    (d / "HaNode.java").write_text(HA_NODE)
    subprocess.run(
        ["javac", "-nowarn", "-cp", CLASSPATH, "-d", str(d), str(d / "HaNode.java")],
        check=True,
        capture_output=True,
    )
    return f"{d}:{CLASSPATH}"


class RocketMQNode:
    """A RocketMQ store in a JVM, driven line by line."""

    def __init__(self, cp: str, root: Path, role: str, port: int, master: str = "-") -> None:
        self.root = root
        self.proc = subprocess.Popen(
            ["java", *JAVA_OPTS, f"-Duser.home={root.parent}", "-cp", cp, "HaNode", str(root),
             role, str(port), master, str(FILE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )  # fmt: skip
        assert self._line() == "ready"

    def _line(self) -> str:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the RocketMQ node ended")
            line = line.strip()  # RocketMQ's own log lines are passed over
            if line.isdigit() or line in ("ready", "bye") or _STATUS.fullmatch(line):
                return line

    def command(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def put(self, n: int) -> list[str]:
        self.command(f"put {n}")
        return [self._line() for _ in range(n)]

    def max_offset(self) -> int:
        self.command("max")
        return int(self._line())

    def close(self) -> None:
        """Kill the JVM (RocketMQ's own shutdown takes seconds; the files are compared while
        it runs, the page cache holding what it wrote)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


@pytest.fixture
def nodes(harness: str) -> Iterator[Any]:
    started: list[RocketMQNode] = []

    def start(root: Path, role: str, port: int = 0, master: str = "-") -> RocketMQNode:
        node = RocketMQNode(harness, root, role, port, master)
        started.append(node)
        return node

    yield start
    for n in started:
        n.close()


def ours(root: Path, **over: Any) -> MessageStore:
    cfg = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=FILE,
        mapped_file_size_consume_queue=20 * 1000,
        max_hash_slot_num=1000,
        max_index_num=4000,
        ha_listen_port=0,
        ha_send_heartbeat_interval=500,
        sync_flush_timeout=3000,
    )
    store = MessageStore(dataclasses.replace(cfg, **over))
    store.load()
    store.start()
    return store


def compare_files(a: Path, b: Path, end: int) -> int:
    """Every commit-log file below ``end`` is the same in both directories; returns how many."""
    names = sorted(p.name for p in a.iterdir() if int(p.name) < end)
    assert names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), f"{name} differs"
    return len(names)


def test_rocketstore_slave_of_a_rocketmq_master(nodes: Any, tmp_path: Path) -> None:
    port = free_port()
    master = nodes(tmp_path / "rmq", "SYNC_MASTER", port)
    # no slave yet: RocketMQ answers SLAVE_NOT_AVAILABLE
    assert master.put(1) == ["SLAVE_NOT_AVAILABLE"]
    slave = ours(tmp_path / "s", broker_role="SLAVE", ha_master_address=f"127.0.0.1:{port}")
    try:
        # RocketMQ acknowledges a SYNC_MASTER put only once our slave reported it
        assert wait_until(lambda: slave.max_phy_offset == master.max_offset())
        statuses = master.put(1200)
        assert statuses == ["PUT_OK"] * 1200
        end = master.max_offset()
        assert end > 4 * FILE  # rolls, each file ending in a BLANK record
        assert slave.max_phy_offset == end  # every acknowledged put is here already
        files = compare_files(tmp_path / "rmq" / "commitlog", tmp_path / "s" / "commitlog", end)
        assert files >= 5
        # our slave dispatched RocketMQ's records: reads and the key index
        wait_dispatched(slave)
        got = []
        offset = 0
        while True:
            g = slave.get_message("g", "T", 1, offset, 32)
            if not g.messages:
                break
            got += [m.body for m in g.messages]
            offset = g.next_begin_offset
        assert got == [rmq_body(seq) for seq in range(1201) if seq % 3 == 1]
        hits = slave.query_message("T", "k1199")
        assert [m.body for m in hits.messages] == [rmq_body(1199)]
    finally:
        slave.shutdown()


def test_rocketmq_slave_of_a_rocketstore_master(nodes: Any, tmp_path: Path) -> None:
    master = ours(tmp_path / "m", broker_role="SYNC_MASTER")
    try:
        addr = f"127.0.0.1:{master.ha.listen_port}"
        slave = nodes(tmp_path / "rmq", "SLAVE", free_port(), addr)
        # RocketMQ's HAClient reports only after its heartbeat interval: connected, then PUT_OK
        assert wait_until(lambda: master.ha.connection_count() == 1)
        assert wait_until(lambda: master.ha.connections[0].ack_offset >= 0)
        results = []
        for i in range(1000):
            body = (f"ours-{i}|" * (1 + i % 50)).encode()
            r = master.put_message(Message("T", body, i % 3, keys=[f"k{i}"], tags="x"))
            assert r.status is PutMessageStatus.PUT_OK, r
            results.append(r)
        end = master.max_phy_offset
        assert end > 4 * FILE
        assert slave.max_offset() == end  # RocketMQ's slave holds every acknowledged put
        compare_files(tmp_path / "m" / "commitlog", tmp_path / "rmq" / "commitlog", end)
        # the slave disconnects: our master answers SLAVE_NOT_AVAILABLE after housekeeping
        slave.close()
        assert wait_until(lambda: master.ha.connection_count() == 0)
        r = master.put_message(Message("T", b"alone", 0))
        assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
    finally:
        master.shutdown()


def test_rocketmq_slave_catches_up_from_the_last_file(nodes: Any, tmp_path: Path) -> None:
    master = ours(tmp_path / "m", broker_role="ASYNC_MASTER", ha_enable=True)
    try:
        for i in range(600):
            master.put_message(Message("T", (f"old-{i}|" * (1 + i % 30)).encode(), i % 3))
        end = master.max_phy_offset
        last = end - end % FILE
        slave = nodes(tmp_path / "rmq", "SLAVE", free_port(), f"127.0.0.1:{master.ha.listen_port}")
        assert wait_until(lambda: slave.max_offset() == end)
        names = sorted(p.name for p in (tmp_path / "rmq" / "commitlog").iterdir())
        assert int(names[0]) == last  # a request of 0 starts at the master's last file
        m_file = (tmp_path / "m" / "commitlog" / names[0]).read_bytes()
        s_file = (tmp_path / "rmq" / "commitlog" / names[0]).read_bytes()
        assert m_file == s_file
    finally:
        master.shutdown()
