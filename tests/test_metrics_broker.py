"""Metrics of a real broker over loopback: messages sent and pulled, a committed offset,
client connections and topics as a scrape of /metrics shows them; the readiness of a broker
that has not started; the CLI's --metrics-listen; a real Prometheus server scraping the port
(skipped without /usr/bin/prometheus: apt-get install -y prometheus)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from rocketstore.broker._config import BrokerConfig
from rocketstore.client import MessageQueue, Producer, PullConsumer
from rocketstore.client._admin import AdminClient
from rocketstore.metrics import MetricsServer
from rocketstore.metrics._broker_source import BrokerSource
from rocketstore.remoting import RemotingClient, RemotingCommand, ResponseCode
from support.metrics import PROMETHEUS
from support.metrics_broker import WAIT_S, Running, running_broker
from support.ports import free_port
from support.remoting import LoopThread
from support.waits import wait_dispatched, wait_until

N = 5
TOPIC = "TMetrics"
GROUP = "GMetrics"


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with running_broker(
        tmp_path_factory.mktemp("metrics") / "store",
        mapped_file_size_commit_log=1024 * 1024,
        mapped_file_size_consume_queue=20 * 1000,
        flush_interval_commit_log=10,
    ) as r:
        yield r


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples
    ]


def value(text: str, name: str, **labels: str) -> float:
    found = [v for n, ls, v in samples(text) if n == name and labels.items() <= ls.items()]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def scrape_while_a_client_is_connected(address: str, metrics_url: str) -> str:
    """/metrics while a client that sent a heartbeat (a producer and a consumer group) is
    connected."""
    body = {
        "clientID": "127.0.0.1@metrics",
        "consumerDataSet": [
            {
                "groupName": GROUP,
                "consumeType": "CONSUME_ACTIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [
                    {"topic": TOPIC, "subString": "*", "expressionType": "TAG", "subVersion": 1}
                ],
                "unitMode": False,
            }
        ],
        "producerDataSet": [{"groupName": "PMetrics"}],
    }
    cmd = RemotingCommand.request(34, {})
    cmd.body = json.dumps(body).encode()
    with RemotingClient(timeout=5) as client:
        assert client.invoke(address, cmd).code == ResponseCode.SUCCESS
        return get(f"{metrics_url}/metrics")[1]


def test_broker_metrics_after_sends_pulls_and_a_commit(running: Running) -> None:
    ns = running.namesrv.address
    mq = MessageQueue(TOPIC, running.broker.config.broker_name, 0)
    with Producer(ns) as producer:
        for i in range(N):
            producer.send(TOPIC, b"m%d" % i, queue=mq)
    wait_dispatched(running.broker.store)  # every message in the queue before the pull
    with PullConsumer(ns, GROUP) as consumer:
        got = consumer.pull(mq, 0, 32)
        assert len(got.messages) == N
        consumer.commit_offset(mq, 2)
    during = scrape_while_a_client_is_connected(running.broker.address, running.url)
    status, text = get(f"{running.url}/metrics")
    assert status == 200
    node = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
    assert value(text, "rocketmq_messages_in_total", topic=TOPIC, **node) == N
    assert value(text, "rocketmq_messages_in_total", topic=TOPIC, message_type="normal") == N
    assert value(text, "rocketmq_throughput_in_total", topic=TOPIC) > N * 2
    out = {"topic": TOPIC, "consumer_group": GROUP}
    assert value(text, "rocketmq_messages_out_total", **out, is_system="false") == N
    assert value(text, "rocketmq_throughput_out_total", **out) == value(
        text, "rocketmq_throughput_in_total", topic=TOPIC
    )
    lag = {**out, "is_retry": "false"}
    assert value(text, "rocketmq_consumer_ready_messages", **lag) == N - 2
    assert value(text, "rocketmq_consumer_inflight_messages", **lag) == 0
    assert value(text, "rocketmq_consumer_lag_latency", **lag) >= 0
    assert value(text, "rocketmq_message_size_count", topic=TOPIC) == N
    pulls = value(
        text,
        "rocketmq_rpc_latency_count",
        request_code="pull_message",
        response_code="success",
        is_long_polling="false",
        result="success",
        protocol_type="remoting",
    )
    assert pulls == 1
    topics = running.loop.call(lambda: len(running.broker.topics.all()))
    assert TOPIC in running.loop.call(lambda: running.broker.topics.all())
    assert value(text, "rocketmq_topic_number", **node) == topics
    assert value(text, "rocketmq_consumer_group_number") == running.loop.call(
        lambda: len(running.broker.groups.all())
    )
    assert value(text, "rocketmq_storage_size", storage_type="local") > 0
    assert value(text, "rocketmq_storage_dispatch_behind_bytes") >= 0
    assert value(text, "rocketstore_namesrv_live_brokers") == 1
    # a master without a slave: no replication lag series at all
    assert not [n for n, _, _ in samples(text) if n == "rocketstore_ha_slave_lag_bytes"]
    # while the heartbeat's connection was open
    mode = {"consumer_group": GROUP, "consume_mode": "pull", "language": "python"}
    assert value(during, "rocketmq_consumer_connections", **mode) == 1
    assert value(during, "rocketmq_producer_connections", language="python") == 1
    # and after it closed
    assert not [n for n, _, _ in samples(text) if n == "rocketmq_consumer_connections"]


def test_broker_health_and_readiness(running: Running) -> None:
    assert get(f"{running.url}/healthz") == (200, "ok\n")
    deadline = time.monotonic() + WAIT_S
    while get(f"{running.url}/readyz")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert get(f"{running.url}/readyz") == (200, "ready\n")
    assert get(f"{running.url}/nothing")[0] == 404


def test_a_broker_not_started_is_not_ready() -> None:
    from types import SimpleNamespace

    broker = SimpleNamespace(config=BrokerConfig(), started=False)
    assert BrokerSource(broker).not_ready() == ["broker broker-a: not started"]  # type: ignore[arg-type]


def test_metrics_without_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    from rocketstore.metrics import MetricsUnavailableError, maybe_start_metrics

    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MetricsUnavailableError, match=r"pip install prometheus-client"):
        MetricsServer([], "127.0.0.1", 0)
    loop = LoopThread()
    try:
        # unset: the default address, skipped; explicit: an error
        assert loop.run(maybe_start_metrics([], None)) is None
        assert loop.run(maybe_start_metrics([], "")) is None
        with pytest.raises(MetricsUnavailableError):
            loop.run(maybe_start_metrics([], "127.0.0.1:0"))
    finally:
        loop.stop()


# ---- the CLI -------------------------------------------------------------------------------


def cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from rocketstore.cli import main; main()", *args]


def test_cli_refuses_a_bad_metrics_listen(tmp_path: Path) -> None:
    done = subprocess.run(
        cli("broker", "--store", str(tmp_path), "--metrics-listen", "nonsense"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--metrics-listen 'nonsense': expected HOST:PORT" in done.stderr


@contextlib.contextmanager
def serve_process(tmp_path: Path, metrics: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    args = cli("serve", "--store", str(tmp_path / "store"), "--grpc-listen", "")
    args += ["--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"]
    args += ["--metrics-listen", metrics]
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy()
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + WAIT_S
        address = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("metrics on http://"):
                address = line.split("http://", 1)[1].split("/", 1)[0]
                break
        assert address, "no metrics line"
        yield proc, address
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def test_serve_with_metrics_listen(tmp_path: Path) -> None:
    port = free_port()
    with serve_process(tmp_path, f"127.0.0.1:{port}") as (proc, address):
        assert address == f"127.0.0.1:{port}"
        deadline = time.monotonic() + WAIT_S
        while get(f"http://{address}/readyz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert get(f"http://{address}/readyz") == (200, "ready\n")
        text = get(f"http://{address}/metrics")[1]
        assert value(text, "rocketstore_namesrv_live_brokers") == 1
        assert value(text, "rocketmq_topic_number") > 0
    assert proc.returncode == 0


def test_serve_with_a_taken_metrics_port_stops_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = cli("serve", "--store", str(tmp_path / "store"), "--grpc-listen", "")
        args += ["--namesrv-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"]
        done = subprocess.run(
            [*args, "--metrics-listen", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error: ")]
    assert str(port) in line
    assert "stopped" in done.stdout  # the broker was shut down cleanly


# ---- Prometheus ----------------------------------------------------------------------------


needs_prometheus = pytest.mark.skipif(
    not os.access(PROMETHEUS, os.X_OK),
    reason=f"no {PROMETHEUS} (Debian: apt-get install -y prometheus)",
)


@contextlib.contextmanager
def prometheus(target: str, tmp_path: Path) -> Iterator[Callable[[str], list[Any]]]:
    """A Prometheus server scraping ``target`` every second; yields a function that polls an
    instant query (bounded) until it has a result and returns the result."""
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: rocketstore\n    static_configs:\n"
        f"      - targets: ['{target}']\n"
    )
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

        def query(expr: str) -> list[Any]:
            url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
            result: list[Any] = []
            deadline = time.monotonic() + 60
            while not result and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.5)
                with (
                    contextlib.suppress(OSError, ValueError),
                    urllib.request.urlopen(url, timeout=5) as response,
                ):
                    result = json.loads(response.read())["data"]["result"]
            assert result, log.read_text()[-2000:]
            return result

        try:
            yield query
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    shutil.rmtree(tmp_path / "tsdb", ignore_errors=True)


@needs_prometheus
def test_prometheus_scrapes_the_broker(running: Running, tmp_path: Path) -> None:
    assert running.metrics is not None
    with prometheus(running.metrics.address, tmp_path) as query:
        (series,) = query(f'rocketmq_messages_in_total{{topic="{TOPIC}"}}')
        assert series["metric"]["job"] == "rocketstore"
        assert series["metric"]["node_id"] == "broker-a"
        sent = running.loop.call(lambda: running.broker.store.statistics().topics[TOPIC])
        assert float(series["value"][1]) == sent.messages


LAG_TOPIC = "TLagged"
LAG_GROUP = "GLagged"
LAG_SENT = 30


@needs_prometheus
def test_prometheus_ready_messages_agree_with_consumer_progress(
    running: Running, tmp_path: Path
) -> None:
    """A group that committed on one queue of four: the gauge Prometheus scrapes counts the
    queues it never committed on too, as GET_CONSUME_STATS (``consumer progress``) does."""
    assert running.metrics is not None
    ns = running.namesrv.address
    broker_name = running.broker.config.broker_name
    with AdminClient(ns, signer=None) as admin:
        admin.create_topic(running.broker.address, LAG_TOPIC, read_queue_nums=4, write_queue_nums=4)
        assert wait_until(lambda: admin.route(LAG_TOPIC) is not None, timeout=WAIT_S)
        with Producer(ns, signer=None) as producer:
            for i in range(LAG_SENT):
                producer.send(LAG_TOPIC, b"lag-%d" % i)
        assert wait_until(lambda: running.broker.store.dispatch_behind_bytes() == 0, WAIT_S)
        mq = MessageQueue(LAG_TOPIC, broker_name, 0)
        with PullConsumer(ns, LAG_GROUP) as consumer:
            got = consumer.pull(mq, 0, 32)
            assert len(got.messages) > 2
            consumer.commit_offset(mq, 2)
        progress = admin.examine_consume_stats(LAG_GROUP, LAG_TOPIC)
    assert len(progress.offset_table) == 4
    assert progress.total_lag() == LAG_SENT - 2
    with prometheus(running.metrics.address, tmp_path) as query:
        (series,) = query(
            f'sum(rocketmq_consumer_ready_messages{{consumer_group="{LAG_GROUP}",'
            f'topic="{LAG_TOPIC}"}})'
        )
        assert float(series["value"][1]) == progress.total_lag()
