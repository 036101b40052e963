"""RocketMQ 4.9.8's own Java programs, driven from tests and benchmarks.

This project ships none of RocketMQ's classes: ``ROCKETMQ_CLASSPATH`` names a classpath with
RocketMQ 4.9.8's namesrv, broker, tools and client classes (and the benchmark producer, for
benchmarks/java_producer_compare.py) and their dependencies. Without it, or without ``java``,
``unavailable()`` says why and the callers skip.

- ``RocketMQServers.start`` runs RocketMQ's ``NamesrvStartup`` and ``BrokerStartup`` on
  127.0.0.1 with a store and a ``user.home`` under a given directory, and waits (bounded) for
  their "boot success" lines; ``stop`` kills both, and a failed start kills what it started.
- ``AdminRunner`` keeps one JVM running ``MQAdminStartup.main0`` for command after command (a
  JVM per command would cost seconds each); each command's standard output and error come back
  as text. The same JVM can hold a consumer and a producer open (``consume``, ``produce``), so
  the brokers see a live client for the connection and status commands. With another
  ``classpath`` and ``clients=False`` the same runner serves RocketMQ 5.3's mqadmin
  (tests/support/rocketmq5.py), and ``opts`` adds JVM options (``-Dtls.enable=true``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import queue
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .java import JAVA as JAVA  # the callers' names for the launch helpers of support.java
from .java import OPENS as OPENS
from .java import JavaProcess, command, small_options
from .ports import free_broker_port, free_port
from .processes import stop_process as kill_process

CLASSPATH = os.environ.get("ROCKETMQ_CLASSPATH", "")
JAVA_OPTS = small_options()  # for tests: small heaps, quick to start

# Each program reads $ROCKETMQ_HOME/conf/logback_<name>.xml; these send its log to a file.
_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d %-5level %logger{{32}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def unavailable() -> str | None:
    """Why RocketMQ's programs cannot run here, or None when they can."""
    if not CLASSPATH:
        return "set ROCKETMQ_CLASSPATH to RocketMQ 4.9.8's namesrv, broker and tools classes"
    if JAVA is None:
        return "no java on PATH"
    return None


def rocketmq_home(root: Path) -> Path:
    """A ROCKETMQ_HOME with only the logging configuration the programs insist on."""
    home = root / "rocketmq-home"
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    for name in ("namesrv", "broker", "tools"):
        log = root / "logs" / f"{name}.log"
        (conf / f"logback_{name}.xml").write_text(_LOGBACK.format(log=log))
    return home


def java_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["ROCKETMQ_HOME"] = str(rocketmq_home(root))
    return env


# for measuring: a bigger heap and the JVM's usual collector and compilers
BENCH_JAVA_OPTS = ["-Xms1g", "-Xmx1g", "-XX:MaxDirectMemorySize=1g", *OPENS]


def java_command(
    root: Path, main: str, *args: str, opts: list[str] | None = None, classpath: str = ""
) -> list[str]:
    """``classpath``: RocketMQ's classes (default ``ROCKETMQ_CLASSPATH``, 4.9.8's)."""
    opts = JAVA_OPTS if opts is None else opts
    return command(classpath or CLASSPATH, main, *args, opts=opts, user_home=root / "user-home")


@dataclass
class RocketMQServers:
    """RocketMQ's name server and one master broker (``broker-a`` of ``DefaultCluster``)."""

    root: Path
    namesrv: str
    broker: str
    opts: list[str] | None = None
    procs: list[JavaProcess] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        root: Path,
        *,
        timeout: float = 60.0,
        opts: list[str] | None = None,
        ns_port: int = 0,
        broker_port: int = 0,
        **broker_conf: str,
    ) -> RocketMQServers:
        """``opts``: JVM options (default JAVA_OPTS); a port 0 is chosen here."""
        root.mkdir(parents=True, exist_ok=True)
        ns_port, broker_port = ns_port or free_port(), broker_port or free_broker_port()
        servers = cls(root, f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}", opts=opts)
        ns_conf = root / "namesrv.conf"
        ns_conf.write_text(
            f"listenPort={ns_port}\n"
            f"kvConfigPath={root / 'namesrv' / 'kvConfig.json'}\n"
            f"configStorePath={root / 'namesrv' / 'namesrv.properties'}\n"
        )
        store = root / "store"
        conf = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": "broker-a",
            "brokerId": "0",
            "brokerIP1": "127.0.0.1",
            "listenPort": str(broker_port),
            "haListenPort": str(broker_port + 1),
            "namesrvAddr": servers.namesrv,
            "storePathRootDir": str(store),
            "storePathCommitLog": str(store / "commitlog"),
            "mappedFileSizeCommitLog": str(64 * 1024 * 1024),
            "flushDiskType": "ASYNC_FLUSH",
            "brokerRole": "ASYNC_MASTER",
            **broker_conf,
        }
        broker_file = root / "broker.conf"
        broker_file.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        try:
            servers._launch("org.apache.rocketmq.namesrv.NamesrvStartup", ns_conf, timeout)
            servers._launch("org.apache.rocketmq.broker.BrokerStartup", broker_file, timeout)
        except BaseException:
            servers.stop()
            raise
        return servers

    def _launch(self, main: str, conf: Path, timeout: float) -> None:
        log = self.root / f"{main.rsplit('.', 1)[1]}.out"
        argv = java_command(self.root, main, "-c", str(conf), opts=self.opts)
        self.procs.append(JavaProcess(argv, log, java_env(self.root)))
        self.procs[-1].wait_for("boot success", timeout)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()


# One JVM, commands on standard input, one tab-separated command a line:
#   admin <mqadmin arguments...>   -> "DONE <base64 stdout> <base64 stderr>"
#   consume <namesrv> <group> <topic> <count> -> a push consumer (kept open) that takes
#       <count> messages and commits their offsets; "DONE" with the count it got, or with
#       how far the offsets got when the broker does not hold them all within 20 s
#   produce <namesrv> <group> <topic> -> a producer (kept open) that sends one message
#   close -> shuts the consumers and producers down
# The admin part runs against RocketMQ 4.9.8's and 5.3's tools alike; the client commands
# (consume, produce, close) are 4.9.8's API and are compiled in only when asked for: the main
# loop finds them by name.
_RUNNER_IMPORTS = r"""
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import org.apache.rocketmq.tools.command.MQAdminStartup;
"""

_CLIENT_IMPORTS = r"""
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.impl.consumer.DefaultMQPushConsumerImpl;
import org.apache.rocketmq.client.impl.factory.MQClientInstance;
import org.apache.rocketmq.common.protocol.header.QueryConsumerOffsetRequestHeader;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageQueue;
"""

_CLIENT_METHODS = r"""
    static List<DefaultMQPushConsumer> consumers = new ArrayList<>();
    static List<DefaultMQProducer> producers = new ArrayList<>();

    static long storedOffset(DefaultMQPushConsumerImpl impl, String group, MessageQueue mq) {
        try {
            MQClientInstance factory = impl.getmQClientFactory();
            String addr = factory.findBrokerAddressInSubscribe(mq.getBrokerName(), 0, true).getBrokerAddr();
            QueryConsumerOffsetRequestHeader h = new QueryConsumerOffsetRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(mq.getTopic());
            h.setQueueId(mq.getQueueId());
            return Math.max(0, factory.getMQClientAPIImpl().queryConsumerOffset(addr, h, 3000));
        } catch (Exception e) {
            return 0;
        }
    }

    static String consume(String[] a) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(a[2]);
        c.setNamesrvAddr(a[1]);
        c.setInstanceName("runner-" + a[2] + "-" + a[1]);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPersistConsumerOffsetInterval(500);
        c.subscribe(a[3], "*");
        int want = Integer.parseInt(a[4]);
        AtomicInteger got = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(want);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (int i = 0; i < msgs.size(); i++) {
                got.incrementAndGet();
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        consumers.add(c);
        done.await(30, TimeUnit.SECONDS);
        // the offsets move once the listener returns; send them then (the consumer's own
        // timer starts after 10 s) and read them back from the broker until it has them all
        DefaultMQPushConsumerImpl impl = c.getDefaultMQPushConsumerImpl();
        // the retry topic is made at the first heartbeat; whether the consumer's first route
        // poll sees it is a race: fetch the routes and rebalance now, so it always does
        impl.getmQClientFactory().updateTopicRouteInfoFromNameServer();
        impl.doRebalance();
        long deadline = System.currentTimeMillis() + 20000;
        long memory = 0;
        long stored = 0;
        while (System.currentTimeMillis() < deadline) {
            memory = 0;
            stored = 0;
            for (MessageQueue mq : impl.getRebalanceImpl().getProcessQueueTable().keySet()) {
                if (mq.getTopic().equals(a[3])) {
                    memory += Math.max(0, impl.getOffsetStore().readOffset(mq, ReadOffsetType.READ_FROM_MEMORY));
                }
            }
            if (memory >= want) {
                impl.persistConsumerOffset();
                Thread.sleep(100);
                for (MessageQueue mq : impl.getRebalanceImpl().getProcessQueueTable().keySet()) {
                    if (mq.getTopic().equals(a[3])) {
                        stored += storedOffset(impl, a[2], mq);
                    }
                }
                if (stored >= want) {
                    break;
                }
            }
            Thread.sleep(50);
        }
        if (memory < want || stored < want) {
            return "offsets " + memory + " in memory, " + stored + " on the broker";
        }
        return Integer.toString(got.get());
    }

    static String produce(String[] a) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer(a[2]);
        p.setNamesrvAddr(a[1]);
        p.setInstanceName("runner-" + a[2] + "-" + a[1]);
        p.start();
        producers.add(p);
        p.send(new Message(a[3], "TagP", "producer-key", "from the producer".getBytes("UTF-8")));
        // the route is known now: tell the broker about the group without waiting 30 s
        p.getDefaultMQProducerImpl().getmQClientFactory().sendHeartbeatToAllBrokerWithLock();
        return "sent";
    }

    static String close(String[] a) {
        for (DefaultMQPushConsumer c : consumers) {
            c.shutdown();
        }
        for (DefaultMQProducer p : producers) {
            p.shutdown();
        }
        consumers.clear();
        producers.clear();
        return "";
    }
"""

_RUNNER_MAIN = r"""
    static String b64(ByteArrayOutputStream b) {
        return Base64.getEncoder().encodeToString(b.toByteArray());
    }

    // main0 appends new command objects to a static list (4.9.8: subCommandList, 5.3:
    // SUB_COMMANDS) and runs the first one of a name: empty it so that each run gets fresh ones
    static void clearCommands() throws Exception {
        for (String name : new String[] {"subCommandList", "SUB_COMMANDS"}) {
            try {
                java.lang.reflect.Field list = MQAdminStartup.class.getDeclaredField(name);
                list.setAccessible(true);
                ((List<?>) list.get(null)).clear();
                return;
            } catch (NoSuchFieldException e) {
                // the other version's name
            }
        }
    }

    public static void main(String[] argv) throws Exception {
        PrintStream out = System.out;
        PrintStream err = System.err;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        out.println("READY");
        out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            String[] a = line.split("\t", -1);
            ByteArrayOutputStream o = new ByteArrayOutputStream();
            ByteArrayOutputStream e = new ByteArrayOutputStream();
            PrintStream po = new PrintStream(o, true, "UTF-8");
            PrintStream pe = new PrintStream(e, true, "UTF-8");
            System.setOut(po);
            System.setErr(pe);
            try {
                if (a[0].equals("admin")) {
                    String[] rest = new String[a.length - 1];
                    System.arraycopy(a, 1, rest, 0, rest.length);
                    clearCommands();
                    MQAdminStartup.main0(rest, null);
                } else {
                    Method m = null;
                    try {
                        m = AdminRunner.class.getDeclaredMethod(a[0], String[].class);
                    } catch (NoSuchMethodException missing) {
                        if (!a[0].equals("close")) {
                            pe.print("no command " + a[0] + " in this runner");
                        }
                    }
                    if (m != null) {
                        try {
                            po.print(m.invoke(null, (Object) a));
                        } catch (InvocationTargetException failed) {
                            throw failed.getCause();
                        }
                    }
                }
            } catch (Throwable t) {
                t.printStackTrace(pe);
            } finally {
                po.flush();
                pe.flush();
                System.setOut(out);
                System.setErr(err);
            }
            out.println("DONE " + b64(o) + " " + b64(e));
            out.flush();
        }
    }
"""


def runner_source(*, clients: bool) -> str:
    """The runner's Java source; ``clients``: with consume, produce and close (4.9.8's client)."""
    imports = _RUNNER_IMPORTS + (_CLIENT_IMPORTS if clients else "")
    body = (_CLIENT_METHODS if clients else "") + _RUNNER_MAIN
    return f"{imports}\n\npublic class AdminRunner {{\n{body}}}\n"


_DONE = re.compile(r"^DONE (\S*) (\S*)$")


@dataclass
class Output:
    out: str
    err: str


class RunnerError(RuntimeError):
    """The runner JVM died, or a command ran out of its time."""


class AdminRunner:
    """One JVM running mqadmin commands (and a consumer and a producer) one after another."""

    def __init__(
        self,
        root: Path,
        *,
        timeout: float = 60.0,
        classpath: str = "",
        opts: list[str] | None = None,
        env: dict[str, str] | None = None,
        clients: bool = True,
    ) -> None:
        """``classpath``, ``opts``: as ``java_command``'s; ``env``: the JVM's environment
        (default ``java_env(root)``); ``clients``: with 4.9.8's consumer and producer commands
        (an admin-only runner also runs 5.3's mqadmin)."""
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        source = root / "AdminRunner.java"
        source.write_text(runner_source(clients=clients))
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr = open(root / "runner.err", "wb")  # noqa: SIM115  (closed in close)
        self.proc = subprocess.Popen(
            java_command(root, str(source), opts=opts, classpath=classpath),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=java_env(root) if env is None else env,
            cwd=root,
        )
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self._expect(timeout, ready=True)
        except BaseException:
            self.close()
            raise

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _expect(self, timeout: float, *, ready: bool = False) -> Output:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                # a late answer would be taken for the next command's: end the runner
                kill_process(self.proc)
                raise RunnerError(f"no answer within {timeout} s; the runner is stopped") from None
            if line is None:
                err = (self.root / "runner.err").read_text("utf-8", "replace")[-3000:]
                raise RunnerError(f"the runner JVM ended:\n{err}")
            if ready and line == "READY":
                return Output("", "")
            done = _DONE.match(line)
            if done:
                out, err = (
                    base64.b64decode(part).decode("utf-8", "replace") for part in done.groups()
                )
                return Output(out, err)

    def _send(self, *words: str, timeout: float) -> Output:
        assert self.proc.stdin is not None
        if self.proc.poll() is not None:
            raise RunnerError("the runner JVM is not running")
        self.proc.stdin.write("\t".join(words) + "\n")
        self.proc.stdin.flush()
        return self._expect(timeout)

    def admin(self, *args: str, timeout: float = 30.0) -> Output:
        return self._send("admin", *args, timeout=timeout)

    def consume(self, namesrv: str, group: str, topic: str, count: int) -> int:
        done = self._send("consume", namesrv, group, topic, str(count), timeout=70.0)
        if not done.out.strip().isdigit():
            raise RunnerError(f"consume failed: {done.out}\n{done.err[-2000:]}")
        return int(done.out)

    def produce(self, namesrv: str, group: str, topic: str) -> Output:
        return self._send("produce", namesrv, group, topic, timeout=30.0)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self._send("close", timeout=15.0)
            with contextlib.suppress(Exception):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                kill_process(self.proc)
        self._stderr.close()
