"""RocketMQ 4.9.8's own ``mqadmin`` against rocketstore, side by side with RocketMQ's broker.

Both sides get the same state, made the same way and in the same order: topic ``TopicA`` with
4 queues and 8 messages sent by ``mqadmin sendMessage`` with keys (two a queue), a consumer
group ``GroupA`` whose Java push consumer took all 8 and committed its offsets, and a Java
producer of group ``ProducerA`` on ``TopicP``; the consumer and the producer stay connected.
Then each mqadmin command runs against both, and the outputs are compared once what may
legitimately differ is masked: addresses and ports, times, message ids, rates, versions and
paths. A command rocketstore does not answer yet (``request type N not supported``) is an
expected failure that names the request; a configuration or status listing where rocketstore
lacks keys RocketMQ prints is an expected failure that lists them.

Needs ``ROCKETMQ_CLASSPATH`` (see tests/support/rocketmq_java.py) and ``java``; skipped otherwise.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.interop import ServerProcess
from support.rocketmq_java import AdminRunner, Output, RocketMQServers, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")

TOPIC = "TopicA"
GROUP = "GroupA"
BROKER_NAME = "broker-a"
CLUSTER = "DefaultCluster"
MESSAGES = [(f"key-{i}", f"body-{i}", "TagA" if i % 2 == 0 else "TagB", i % 4) for i in range(8)]
# where RocketMQ's tools write the bodies of the messages they print
BODY_DIR = Path("/tmp/rocketmq/msgbodys")


@dataclass
class Side:
    """One broker and name server as seen by the commands."""

    name: str
    namesrv: str
    broker: str
    uniq_keys: dict[str, str] = field(default_factory=dict)  # message key -> its message id

    def words(self, template: str) -> list[str]:
        return [self.fill(w) for w in template.split()]

    def fill(self, word: str) -> str:
        word = word.replace("{ns}", self.namesrv).replace("{br}", self.broker)
        return re.sub(r"\{uk:([^}]+)\}", lambda m: self.uniq_keys[m.group(1)], word)


@dataclass
class Bench:
    runner: AdminRunner
    rmq: Side
    rs: Side

    def run(self, side: Side, template: str) -> Output:
        return self.runner.admin(*side.words(template))


def _serve(root: Path) -> ServerProcess:
    root.mkdir(parents=True, exist_ok=True)
    # the store's places named in a broker.conf and ROCKETMQ_HOME set, as for RocketMQ's side
    conf = root / "broker.conf"
    conf.write_text(f"storePathCommitLog={root / 'store' / 'commitlog'}\n")
    args = ["env", f"ROCKETMQ_HOME={root}", sys.executable, "-c"]
    args += ["from rocketstore.cli import main; main()", "serve", "-c", str(conf)]
    args += ["--store", str(root / "store"), "--namesrv-listen", "127.0.0.1:0"]
    args += ["--listen", "127.0.0.1:0", "--grpc-listen", "", "--metrics-listen", ""]
    args += ["--console-listen", "", "--log-dir", str(root / "logs")]
    server = ServerProcess(args, root / "serve.log", want_namesrv=True, want_broker=True)
    return server._wait_started(30.0)


def _prepare(bench: Bench, side: Side) -> None:
    def ok(template: str) -> str:
        done = bench.run(side, template)
        assert "Exception" not in done.err, f"{side.name}: {template}:\n{done.out}\n{done.err}"
        return done.out

    ok(f"updateTopic -n {{ns}} -c {CLUSTER} -t {TOPIC} -r 4 -w 4")
    ok(f"updateTopic -n {{ns}} -c {CLUSTER} -t TopicP -r 1 -w 1")
    ok(f"updateSubGroup -n {{ns}} -c {CLUSTER} -g {GROUP}")
    for key, body, tag, queue in MESSAGES:
        out = ok(
            f"sendMessage -n {{ns}} -t {TOPIC} -p {body} -k {key} -c {tag} -b {BROKER_NAME} -i {queue}"
        )
        assert "SEND_OK" in out, out
        side.uniq_keys[key] = re.findall(r"[0-9A-F]{32,}", out)[-1]
    assert bench.runner.consume(side.namesrv, GROUP, TOPIC, len(MESSAGES)) == len(MESSAGES)
    made = bench.runner.produce(side.namesrv, "ProducerA", "TopicP")
    assert made.out == "sent", made.err


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    root = tmp_path_factory.mktemp("mqadmin")
    with contextlib.ExitStack() as stack:
        rmq = RocketMQServers.start(root / "rocketmq")
        stack.callback(rmq.stop)
        rs = _serve(root / "rocketstore")
        stack.callback(rs.stop)
        runner = AdminRunner(root / "runner")
        stack.callback(runner.close)
        assert rs.namesrv is not None and rs.broker is not None
        made = Bench(
            runner,
            Side("rocketmq", rmq.namesrv, rmq.broker),
            Side("rocketstore", rs.namesrv, rs.broker),
        )
        stack.callback(_remove_bodies, made)
        _prepare(made, made.rmq)
        _prepare(made, made.rs)
        yield made


def _remove_bodies(bench: Bench) -> None:
    for side in (bench.rmq, bench.rs):
        for key in side.uniq_keys.values():
            with contextlib.suppress(OSError):
                (BODY_DIR / key).unlink()


# ---- masking what may differ --------------------------------------------------------------

_MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\d[ #]\d\d:\d\d:\d\d(?:[,:]\d{3})?"), "<time>"),
    (re.compile(r"\b1\d{12}\b"), "<millis>"),
    (re.compile(r"\b[0-9A-F]{32,}\b"), "<msgid>"),
    (re.compile(r"/?\b\d{1,3}(?:\.\d{1,3}){3}:\d+"), "<addr>"),
    (re.compile(r"\b\d+\.\d+\b"), "<num>"),
    (re.compile(r"[ \t]+"), " "),
]


def mask(side: Side, text: str) -> str:
    text = text.replace(side.namesrv, "<namesrv>").replace(side.broker, "<broker>")
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def _failure(done: Output) -> str | None:
    """The first line saying why a command failed, or None."""
    for line in (done.err + "\n" + done.out).splitlines():
        if "Exception" in line or " Failed" in line:
            causes = re.findall(r"(?:CODE: \d+\s+DESC: .*|Caused by: .*)", done.err)
            return causes[-1] if causes else line
    return None


def _unsupported(done: Output) -> str | None:
    found = re.search(r"request type \d+ not supported", done.err + done.out)
    return found.group(0) if found else None


def key_values(text: str, sep: str) -> dict[str, str]:
    pairs = {}
    for line in text.splitlines():
        if sep in line and not line.startswith("="):
            key, _, value = line.partition(sep)
            pairs[key.strip()] = value.strip()
    return pairs


# ---- the cases ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """mqadmin command lines (run in order; their outputs are compared together) and how."""

    name: str
    commands: tuple[str, ...]
    # text: masked outputs equal; keys / config-keys: RocketMQ's "key : value" / "key = value"
    # keys all there; config: that, and equal values but for ``ignore``d keys; stats: the
    # first three columns; updated-*: the update's answer, and the new value read back
    compare: str = "text"
    ignore: Callable[[str], bool] = lambda key: False


def _case(
    name: str,
    *commands: str,
    compare: str = "text",
    ignore: Callable[[str], bool] = lambda key: False,
) -> Case:
    return Case(name, commands, compare, ignore)


# values of these name server settings differ by design (addresses, paths, Java thread pools)
_NAMESRV_VALUES_DIFFER = {"listenPort", "kvConfigPath", "configStorePath", "rocketmqHome"}

CASES = [
    _case(
        "updateTopic",
        f"updateTopic -n {{ns}} -c {CLUSTER} -t TopicB -r 2 -w 2",
        "topicRoute -n {ns} -t TopicB",
    ),
    _case("topicList", "topicList -n {ns}"),
    _case("topicRoute", f"topicRoute -n {{ns}} -t {TOPIC}"),
    _case("topicStatus", f"topicStatus -n {{ns}} -t {TOPIC}"),
    _case("clusterList", "clusterList -n {ns}"),
    _case("brokerStatus", "brokerStatus -n {ns} -b {br}", compare="keys"),
    _case("consumerProgress", f"consumerProgress -n {{ns}} -g {GROUP}"),
    _case("consumerConnection", f"consumerConnection -n {{ns}} -g {GROUP}"),
    _case("consumerStatus", f"consumerStatus -n {{ns}} -g {GROUP}"),
    _case("producerConnection", "producerConnection -n {ns} -g ProducerA -t TopicP"),
    _case("queryMsgByKey", f"queryMsgByKey -n {{ns}} -t {TOPIC} -k key-5"),
    _case("queryMsgByOffset", f"queryMsgByOffset -n {{ns}} -t {TOPIC} -b {BROKER_NAME} -i 1 -o 1"),
    _case("queryMsgByUniqueKey", f"queryMsgByUniqueKey -n {{ns}} -t {TOPIC} -i {{uk:key-6}}"),
    _case("getBrokerConfig", "getBrokerConfig -n {ns} -b {br}", compare="config-keys"),
    _case(
        "updateBrokerConfig",
        "updateBrokerConfig -n {ns} -b {br} -k shortPollingTimeMills -v 1500",
        "getBrokerConfig -n {ns} -b {br}",
        compare="updated-broker-config",
    ),
    _case(
        "getNamesrvConfig",
        "getNamesrvConfig -n {ns}",
        compare="config",
        ignore=lambda key: key in _NAMESRV_VALUES_DIFFER,
    ),
    _case(
        "updateNamesrvConfig",
        "updateNamesrvConfig -n {ns} -k productEnvName -v checked",
        "getNamesrvConfig -n {ns}",
        "updateNamesrvConfig -n {ns} -k productEnvName -v center",
        compare="updated-namesrv-config",
    ),
    _case("brokerConsumeStats", "brokerConsumeStats -n {ns} -b {br}"),
    _case("queryCq", f"queryCq -n {{ns}} -t {TOPIC} -q 3 -i 0 -c 4"),
    _case("cleanExpiredCQ", "cleanExpiredCQ -n {ns} -b {br}"),
    _case("cleanUnusedTopic", "cleanUnusedTopic -n {ns} -b {br}"),
    _case("statsAll", f"statsAll -n {{ns}} -t {TOPIC}", compare="stats"),
    _case(
        "updateKvConfig/deleteKvConfig",
        "updateKvConfig -n {ns} -s ORDER_TOPIC_CONFIG -k TopicZ -v broker-a:4",
        "deleteKvConfig -n {ns} -s ORDER_TOPIC_CONFIG -k TopicZ",
    ),
    _case(
        "wipeWritePerm/addWritePerm",
        f"wipeWritePerm -n {{ns}} -b {BROKER_NAME}",
        f"topicRoute -n {{ns}} -t {TOPIC}",
        f"addWritePerm -n {{ns}} -b {BROKER_NAME}",
        f"topicRoute -n {{ns}} -t {TOPIC}",
    ),
    _case(
        "cloneGroupOffset",
        f"cloneGroupOffset -n {{ns}} -s {GROUP} -d GroupB -t {TOPIC}",
        "brokerConsumeStats -n {ns} -b {br}",
    ),
    _case("printMsg", f"printMsg -n {{ns}} -t {TOPIC} -d true"),
    _case("consumeMessage", f"consumeMessage -n {{ns}} -t {TOPIC} -b {BROKER_NAME} -i 3 -o 0 -c 2"),
    _case("allocateMQ", f"allocateMQ -n {{ns}} -t {TOPIC} -i 127.0.0.1,127.0.0.2"),
    _case(
        "resetOffsetByTime",
        f"resetOffsetByTime -n {{ns}} -g {GROUP} -t {TOPIC} -s now",
        f"consumerProgress -n {{ns}} -g {GROUP}",
    ),
    _case(
        "updateTopicPerm",
        f"updateTopicPerm -n {{ns}} -t {TOPIC} -b {{br}} -p 4",
        f"topicRoute -n {{ns}} -t {TOPIC}",
    ),
    _case("topicClusterList", f"topicClusterList -n {{ns}} -t {TOPIC}"),
    _case(
        "deleteTopic",
        f"deleteTopic -n {{ns}} -c {CLUSTER} -t TopicB",
        "topicList -n {ns}",
    ),
]


def _run_case(bench: Bench, case: Case, side: Side) -> list[Output]:
    return [bench.run(side, command) for command in case.commands]


def _missing_keys(expected: dict[str, str], got: dict[str, str]) -> list[str]:
    # a per-path key (commitLogDiskRatio_/the/store/path) is compared by its prefix
    have = {k.split("_/")[0] for k in got}
    return sorted(k for k in expected if k.split("_/")[0] not in have)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mqadmin_matches_rocketmq(bench: Bench, case: Case) -> None:
    want = _run_case(bench, case, bench.rmq)
    got = _run_case(bench, case, bench.rs)
    for command, w in zip(case.commands, want, strict=True):
        assert _failure(w) is None, f"RocketMQ itself failed {command}:\n{w.out}\n{w.err[-3000:]}"
    for command, g in zip(case.commands, got, strict=True):
        reason = _unsupported(g)
        if reason is not None:
            pytest.xfail(f"rocketstore: {command.split()[0]}: {reason}")
        assert _failure(g) is None, f"rocketstore failed {command}:\n{g.out}\n{g.err[-3000:]}"

    if case.compare == "text":
        for command, w, g in zip(case.commands, want, got, strict=True):
            assert mask(bench.rs, g.out) == mask(bench.rmq, w.out), command
        return
    if case.compare == "stats":
        # the 24-hour message counts come from minute samples RocketMQ has not taken yet
        def cut(side: Side, out: str) -> list[list[str]]:
            return [line.split()[:3] for line in mask(side, out).splitlines()]

        assert cut(bench.rs, got[0].out) == cut(bench.rmq, want[0].out)
        return
    if case.compare == "updated-broker-config":
        assert mask(bench.rs, got[0].out) == mask(bench.rmq, want[0].out)
        for outs in (want, got):
            assert key_values(outs[1].out, "=")["shortPollingTimeMills"] == "1500"
        return
    if case.compare == "updated-namesrv-config":
        for n in (0, 2):
            assert mask(bench.rs, got[n].out) == mask(bench.rmq, want[n].out)
        for outs in (want, got):
            assert key_values(outs[1].out, "=")["productEnvName"] == "checked"
        return

    sep = ":" if case.compare == "keys" else "="
    expected, actual = key_values(want[0].out, sep), key_values(got[0].out, sep)
    if case.compare == "config":
        for key in sorted(set(expected) & set(actual)):
            if not case.ignore(key):
                assert actual[key] == expected[key], key
    missing = _missing_keys(expected, actual)
    if missing:
        pytest.xfail(f"rocketstore lacks {len(missing)} of RocketMQ's keys: {', '.join(missing)}")


def test_both_sides_hold_the_same_messages(bench: Bench) -> None:
    """The state the cases compare is the same: each message where the other side has it."""
    for key, _body, _tag, queue in MESSAGES:
        outs = []
        for side in (bench.rmq, bench.rs):
            done = bench.run(side, f"queryMsgByUniqueKey -n {{ns}} -t {TOPIC} -i {{uk:{key}}}")
            assert f"Keys: [{key}]" in mask(side, done.out), done.err[-2000:]
            outs.append(mask(side, done.out))
        assert outs[0] == outs[1]
        assert f"Queue ID: {queue}" in outs[0]
