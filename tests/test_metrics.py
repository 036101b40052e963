"""Metrics: the collector's exposition over a fake source, the broker's request counting, and
the HTTP server's answers (404, 405, oversized requests, health and readiness)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("prometheus_client")

from rocketstore.broker.state._stats import (
    BROKER_GET_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    BrokerStats,
    code_name,
    message_type,
    message_type_parsed,
)
from rocketstore.metrics import (
    MetricsHttpServer,
    MetricsListenError,
    MetricsServer,
    default_metrics_listen,
    parse_listen,
)
from rocketstore.metrics._http import MAX_CONNECTIONS, PROBE_SLOTS
from rocketstore.remoting import RemotingCommand, RequestCode, ResponseCode
from support.metrics import FakeNamesrv, FakeSource

N = 'cluster="C1",node_id="b1",node_type="broker"'
EXPECTED = f"""\
# HELP rocketmq_messages_in_total Messages stored
# TYPE rocketmq_messages_in_total counter
rocketmq_messages_in_total{{cluster="C1",is_system="false",message_type="delay",node_id="b1",node_type="broker",topic="T"}} 3.0
# HELP rocketmq_throughput_in_total Bytes stored
# TYPE rocketmq_throughput_in_total counter
rocketmq_throughput_in_total{{cluster="C1",is_system="false",message_type="delay",node_id="b1",node_type="broker",topic="T"}} 300.0
# HELP rocketmq_messages_out_total Messages handed to consumers
# TYPE rocketmq_messages_out_total counter
rocketmq_messages_out_total{{cluster="C1",consumer_group="G",is_system="true",node_id="b1",node_type="broker",topic="T"}} 2.0
# HELP rocketmq_throughput_out_total Bytes handed to consumers
# TYPE rocketmq_throughput_out_total counter
rocketmq_throughput_out_total{{cluster="C1",consumer_group="G",is_system="true",node_id="b1",node_type="broker",topic="T"}} 200.0
# HELP rocketmq_message_size Sizes of the messages sent
# TYPE rocketmq_message_size histogram
rocketmq_message_size_bucket{{cluster="C1",is_system="false",le="1024.0",message_type="normal",node_id="b1",node_type="broker",topic="T"}} 2.0
rocketmq_message_size_bucket{{cluster="C1",is_system="false",le="4096.0",message_type="normal",node_id="b1",node_type="broker",topic="T"}} 3.0
rocketmq_message_size_bucket{{cluster="C1",is_system="false",le="+Inf",message_type="normal",node_id="b1",node_type="broker",topic="T"}} 3.0
rocketmq_message_size_count{{cluster="C1",is_system="false",message_type="normal",node_id="b1",node_type="broker",topic="T"}} 3.0
rocketmq_message_size_sum{{cluster="C1",is_system="false",message_type="normal",node_id="b1",node_type="broker",topic="T"}} 3000.0
# HELP rocketmq_rpc_latency Milliseconds from a request's arrival to its response
# TYPE rocketmq_rpc_latency histogram
rocketmq_rpc_latency_bucket{{cluster="C1",is_long_polling="true",le="1.0",node_id="b1",node_type="broker",protocol_type="remoting",request_code="pull_message",response_code="success",result="success"}} 1.0
rocketmq_rpc_latency_bucket{{cluster="C1",is_long_polling="true",le="+Inf",node_id="b1",node_type="broker",protocol_type="remoting",request_code="pull_message",response_code="success",result="success"}} 2.0
rocketmq_rpc_latency_count{{cluster="C1",is_long_polling="true",node_id="b1",node_type="broker",protocol_type="remoting",request_code="pull_message",response_code="success",result="success"}} 2.0
rocketmq_rpc_latency_sum{{cluster="C1",is_long_polling="true",node_id="b1",node_type="broker",protocol_type="remoting",request_code="pull_message",response_code="success",result="success"}} 7.5
# HELP rocketmq_consumer_ready_messages Messages not yet consumed
# TYPE rocketmq_consumer_ready_messages gauge
rocketmq_consumer_ready_messages{{cluster="C1",consumer_group="G",is_retry="true",is_system="false",node_id="b1",node_type="broker",topic="%RETRY%G"}} 4.0
# HELP rocketmq_consumer_inflight_messages Messages received and not yet acknowledged
# TYPE rocketmq_consumer_inflight_messages gauge
rocketmq_consumer_inflight_messages{{cluster="C1",consumer_group="G",is_retry="true",is_system="false",node_id="b1",node_type="broker",topic="%RETRY%G"}} 1.0
# HELP rocketmq_consumer_lag_latency Milliseconds since the oldest unconsumed message was stored
# TYPE rocketmq_consumer_lag_latency gauge
rocketmq_consumer_lag_latency{{cluster="C1",consumer_group="G",is_retry="true",is_system="false",node_id="b1",node_type="broker",topic="%RETRY%G"}} 50.0
# HELP rocketmq_producer_connections Producer connections
# TYPE rocketmq_producer_connections gauge
rocketmq_producer_connections{{cluster="C1",language="java",node_id="b1",node_type="broker",protocol_type="remoting",version="409"}} 1.0
# HELP rocketmq_consumer_connections Consumer connections
# TYPE rocketmq_consumer_connections gauge
rocketmq_consumer_connections{{cluster="C1",consume_mode="push",consumer_group="G",is_system="false",language="java",node_id="b1",node_type="broker",protocol_type="remoting",version="409"}} 2.0
# HELP rocketmq_topic_number Topics
# TYPE rocketmq_topic_number gauge
rocketmq_topic_number{{{N}}} 7.0
# HELP rocketmq_consumer_group_number Subscription groups
# TYPE rocketmq_consumer_group_number gauge
rocketmq_consumer_group_number{{{N}}} 2.0
# HELP rocketmq_storage_size Bytes used on the store's file system
# TYPE rocketmq_storage_size gauge
rocketmq_storage_size{{{N},storage_medium="disk",storage_type="local"}} 10.0
# HELP rocketmq_storage_flush_behind_bytes Commit log bytes written and not yet flushed
# TYPE rocketmq_storage_flush_behind_bytes gauge
rocketmq_storage_flush_behind_bytes{{{N},storage_medium="disk",storage_type="local"}} 2.0
# HELP rocketmq_storage_dispatch_behind_bytes Commit log bytes not yet dispatched to the consume queues
# TYPE rocketmq_storage_dispatch_behind_bytes gauge
rocketmq_storage_dispatch_behind_bytes{{{N},storage_medium="disk",storage_type="local"}} 1.0
# HELP rocketstore_mapped_files Store files mapped
# TYPE rocketstore_mapped_files gauge
rocketstore_mapped_files{{{N}}} 4.0
# HELP rocketstore_consume_queue_files Consume-queue files
# TYPE rocketstore_consume_queue_files gauge
rocketstore_consume_queue_files{{{N},state="mapped"}} 3.0
rocketstore_consume_queue_files{{{N},state="all"}} 30.0
# HELP rocketstore_consume_queue_mapped_limit Consume-queue files that may be mapped at once (idle ones are unmapped beyond it)
# TYPE rocketstore_consume_queue_mapped_limit gauge
rocketstore_consume_queue_mapped_limit{{{N}}} 16.0
# HELP rocketstore_consume_queue_unmaps_total Idle consume-queue files unmapped for the limit
# TYPE rocketstore_consume_queue_unmaps_total counter
rocketstore_consume_queue_unmaps_total{{{N}}} 27.0
# HELP rocketstore_process_open_files Open files of the process
# TYPE rocketstore_process_open_files gauge
rocketstore_process_open_files{{{N}}} 40.0
# HELP rocketstore_process_open_files_limit The process's open-file limit (soft)
# TYPE rocketstore_process_open_files_limit gauge
rocketstore_process_open_files_limit{{{N}}} 1024.0
# HELP rocketstore_process_mappings Memory mappings of the process
# TYPE rocketstore_process_mappings gauge
rocketstore_process_mappings{{{N}}} 300.0
# HELP rocketstore_process_max_map_count The kernel's mapping limit (vm.max_map_count)
# TYPE rocketstore_process_max_map_count gauge
rocketstore_process_max_map_count{{{N}}} 65530.0
# HELP rocketstore_ha_slave_lag_bytes Bytes a slave has not yet acknowledged
# TYPE rocketstore_ha_slave_lag_bytes gauge
rocketstore_ha_slave_lag_bytes{{{N},slave="127.0.0.1:1"}} 5.0
# HELP rocketstore_ha_refused_peers_total Peers the HA port refused (no proof, an unknown or connected replica id)
# TYPE rocketstore_ha_refused_peers_total counter
rocketstore_ha_refused_peers_total{{{N}}} 4.0
# HELP rocketstore_namesrv_live_brokers Brokers registered with the name server
# TYPE rocketstore_namesrv_live_brokers gauge
rocketstore_namesrv_live_brokers 3.0
"""


def test_collector_exposition_over_a_fake_source() -> None:
    server = MetricsServer([FakeSource()], "127.0.0.1", 0, namesrv=FakeNamesrv())
    assert server.render().decode() == EXPECTED


def test_exposition_parses_back_with_the_families_types() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f.type for f in text_string_to_metric_families(EXPECTED)}
    assert families["rocketmq_messages_in"] == "counter"
    assert families["rocketmq_rpc_latency"] == "histogram"
    assert families["rocketmq_consumer_lag_latency"] == "gauge"
    assert families["rocketstore_consume_queue_unmaps"] == "counter"
    assert families["rocketstore_process_open_files_limit"] == "gauge"
    assert families["rocketstore_ha_refused_peers"] == "counter"
    assert len(families) == 27


def test_name_server_only_has_no_broker_families() -> None:
    server = MetricsServer([], "127.0.0.1", 0, namesrv=FakeNamesrv())
    text = server.render().decode()
    assert "rocketmq_" not in text
    assert "rocketstore_namesrv_live_brokers 3.0" in text


@pytest.mark.parametrize(
    ("listen", "expected"),
    [("127.0.0.1:5557", ("127.0.0.1", 5557)), ("[::1]:0", ("::1", 0)), ("h:65535", ("h", 65535))],
)
def test_parse_listen(listen: str, expected: tuple[str, int]) -> None:
    assert parse_listen(listen) == expected


@pytest.mark.parametrize(
    ("listen_port", "expected"),
    [
        (None, "127.0.0.1:5557"),  # a process without a broker or controller port
        (10911, "127.0.0.1:5557"),  # RocketMQ's broker port keeps RocketMQ 5's exporter port
        (10921, "127.0.0.1:10923"),  # the second broker of docs/failover.md: HA on 10922
        (9878, "127.0.0.1:9880"),  # a controller alone
        (0, "127.0.0.1:0"),  # a server on a port of the system's choosing
        (65534, "127.0.0.1:5557"),  # no port above 65535
    ],
)
def test_default_metrics_address(listen_port: int | None, expected: str) -> None:
    assert default_metrics_listen(listen_port) == expected
    ports = {default_metrics_listen(p) for p in (10911, 10921, 10931, 9878, 9868)}
    assert len(ports) == 5  # the servers of one host never share the default


@pytest.mark.parametrize("listen", ["5557", ":5557", "h:", "h:x", "h:65536", "h:-1"])
def test_parse_listen_refuses(listen: str) -> None:
    with pytest.raises(MetricsListenError, match="HOST:PORT"):
        parse_listen(listen)


# ---- BrokerStats -------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _send(topic: str, properties: str, body: bytes) -> RemotingCommand:
    cmd = RemotingCommand.request(310, {"b": topic, "i": properties})
    cmd.body = body
    return cmd


def test_stats_time_a_direct_answer_and_the_message_size() -> None:
    clock = Clock()
    stats = BrokerStats(clock)

    def handler(cmd: RemotingCommand, conn: object) -> RemotingCommand:
        clock.t += 0.004
        return RemotingCommand.response(ResponseCode.SUCCESS)

    timed = stats.timed(handler)
    timed(_send("T", "DELAY\x013", b"x" * 2000), None)
    ((key, h),) = stats.rpc_latency.items()
    assert key == (310, ResponseCode.SUCCESS, False, "success")
    assert h.counts == [0, 0, 1, 0, 0, 0, 0, 0, 0, 0]  # 4 ms: in (3, 5]
    assert h.sum == pytest.approx(4.0)
    ((size_key, size),) = stats.message_size.items()
    assert size_key == ("T", "delay")
    assert size.counts == [0, 1, 0, 0, 0, 0, 0] and size.sum == 2000


def test_stats_time_a_held_request_until_it_is_answered() -> None:
    async def run() -> None:
        clock = Clock()
        stats = BrokerStats(clock)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        result = stats.timed(lambda cmd, conn: fut)(RemotingCommand.request(11, {}), None)
        assert result is fut and not stats.rpc_latency
        clock.t += 2.5
        fut.set_result(RemotingCommand.response(ResponseCode.PULL_NOT_FOUND))
        await asyncio.sleep(0)
        ((key, h),) = stats.rpc_latency.items()
        assert key == (11, ResponseCode.PULL_NOT_FOUND, True, "success")
        assert h.counts[-2] == 1  # 2.5 s: in (2 s, 3 s]

    asyncio.run(run())


def test_stats_count_failures_and_coroutines() -> None:
    async def run() -> None:
        stats = BrokerStats(Clock())

        def broken(cmd: RemotingCommand, conn: object) -> RemotingCommand:
            raise ValueError("bad")

        async def later(cmd: RemotingCommand, conn: object) -> RemotingCommand:
            return RemotingCommand.response(ResponseCode.SYSTEM_ERROR)

        with pytest.raises(ValueError, match="bad"):
            stats.timed(broken)(RemotingCommand.request(10, {}), None)
        response = await stats.timed(later)(RemotingCommand.request(99999, {}), None)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert set(stats.rpc_latency) == {
            (10, None, False, "process_request_failed"),
            (99999, ResponseCode.SYSTEM_ERROR, True, "success"),
        }
        assert code_name(99999, RequestCode) == "99999" and code_name(None, ResponseCode) == ""
        assert code_name(310, RequestCode) == "send_message_v2"

    asyncio.run(run())


def test_stats_out_counts_per_topic_and_group() -> None:
    stats = BrokerStats()
    stats.note_out("T", "G", 3, 300)
    stats.note_out("T", "G", 2, 100)
    stats.note_out("T", "H", 0, 0)
    counts = {key: (t.messages, t.size) for key, t in stats.out.items()}
    assert counts == {("T", "G"): (5, 400), ("T", "H"): (0, 0)}
    # the same figures in the rolling counters VIEW_BROKER_STATS_DATA reads
    assert stats.rolling.get(GROUP_GET_NUMS, "T@G").value == 5  # type: ignore[union-attr]
    assert stats.rolling.get(GROUP_GET_SIZE, "T@G").value == 400  # type: ignore[union-attr]
    assert stats.rolling.get(BROKER_GET_NUMS, "").value == 5  # type: ignore[union-attr]
    assert stats.rolling.get(GROUP_GET_NUMS, "T@H").times == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("properties", "kind"),
    [
        ("", "normal"),
        ("TAGS\x01a\x02KEYS\x01k", "normal"),
        ("TRAN_MSG\x01true\x02PGROUP\x01p", "transaction"),
        ("__SHARDINGKEY\x01k", "fifo"),
        ("DELAY\x013", "delay"),
        ("TIMER_DELIVER_MS\x01123", "delay"),
    ],
)
def test_message_type(properties: str, kind: str) -> None:
    assert message_type(properties) == kind
    assert message_type_parsed(properties) == kind


_TYPE_NAMES = st.sampled_from(
    [
        "TRAN_MSG", "__SHARDINGKEY", "__STARTDELIVERTIME", "DELAY", "TIMER_DELIVER_MS",
        "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TAGS", "KEYS", "UNIQ_KEY", "XDELAY", "TRAN_MSGX",
        "a\x01DELAY", "",
    ]
)  # fmt: skip
_TYPE_VALUES = st.sampled_from(["true", "false", "1", "", "x\x01true", "TRAN_MSG", "DELAY"])


@given(st.lists(st.tuples(_TYPE_NAMES, _TYPE_VALUES), max_size=6), st.booleans())
def test_message_type_shortcut_matches_the_parse(
    pairs: list[tuple[str, str]], trailing: bool
) -> None:
    text = "\x02".join(f"{k}\x01{v}" for k, v in pairs) + ("\x02" if trailing else "")
    assert message_type(text) == message_type_parsed(text)


# ---- HTTP ----------------------------------------------------------------------------------


async def _request(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), headers, body


def _get(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


def test_http_server_answers() -> None:
    async def run() -> None:
        source = FakeSource()
        source.reasons = ["broker b1: not started"]
        server = MetricsServer([source], "127.0.0.1", 0, namesrv=FakeNamesrv())
        await server.start()
        try:
            port = server.http.port
            assert port > 0 and server.address == f"127.0.0.1:{port}"
            status, headers, body = await _request(port, _get("/metrics?x=1"))
            assert status == 200 and body.decode() == EXPECTED
            assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert int(headers["Content-Length"]) == len(body)
            assert (await _request(port, _get("/healthz")))[::2] == (200, b"ok\n")
            assert (await _request(port, _get("/readyz")))[::2] == (
                503,
                b"broker b1: not started\n",
            )
            source.reasons = []
            assert (await _request(port, _get("/readyz")))[::2] == (200, b"ready\n")
            status, headers, body = await _request(port, _get("/metrics", "HEAD"))
            assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
            assert (await _request(port, _get("/")))[0] == 404
            assert (await _request(port, _get("/metricsx")))[0] == 404
            status, headers, _ = await _request(port, _get("/metrics", "POST"))
            assert status == 405 and headers["Allow"] == "GET, HEAD"
            assert (await _request(port, b"NONSENSE\r\n\r\n"))[0] == 400
            assert (await _request(port, b"GET / SPDY/3\r\n\r\n"))[0] == 400
            big = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 20_000 + b"\r\n\r\n"
            assert (await _request(port, big))[0] == 431
            assert server.http.scrapes == 2
        finally:
            await server.close()

    asyncio.run(run())


def test_http_server_drops_a_silent_client_and_a_failing_render() -> None:
    async def run() -> None:
        def broken() -> bytes:
            raise RuntimeError("boom")

        http = MetricsHttpServer(broken, lambda: [], "127.0.0.1", 0, timeout_s=0.2)
        await http.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
            writer.write(b"GET /metrics HTTP/1.1\r\n")  # never finishes its head
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            status, _, body = await _request(http.port, _get("/metrics"))
            assert status == 500 and b"failed" in body
        finally:
            await http.close()

    asyncio.run(run())


def test_half_open_connections_do_not_starve_the_health_probes() -> None:
    """More half-open connections than the port has slots (each a connection that sends no
    request), in waves: /healthz and /readyz are still answered at once, the server closing
    the connection that has waited longest for its request to make room."""

    async def run() -> None:
        server = MetricsServer([FakeSource()], "127.0.0.1", 0, namesrv=FakeNamesrv())
        await server.start()
        http = server.http
        port = http.port
        held: list[asyncio.StreamWriter] = []
        try:
            slots = MAX_CONNECTIONS + PROBE_SLOTS
            requests = 0
            for wave in range(1, 4):
                for _ in range(slots + 4):
                    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    held.append(writer)
                # (the server takes connections in the order they were made)
                assert (await _request(port, _get("/healthz")))[::2] == (200, b"ok\n")
                assert (await _request(port, _get("/readyz")))[::2] == (200, b"ready\n")
                assert (await _request(port, _get("/metrics")))[0] == 200
                # every slot was taken, and the connections beyond them (the first request
                # included) made room by closing the oldest without a request; the answered
                # requests left of their own
                made = wave * (slots + 4) + requests
                assert http.evicted == made - slots - requests + 1 and http.refused == 0
                requests += 3
            for writer in held:
                writer.close()
        finally:
            await server.close()

    asyncio.run(asyncio.wait_for(run(), 60))


def test_a_slowloris_is_cut_at_the_head_timeout() -> None:
    async def run() -> None:
        http = MetricsHttpServer(lambda: b"", lambda: [], "127.0.0.1", 0, timeout_s=0.5)
        await http.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", http.port)
            writer.write(b"GET /metrics HTTP/1.1\r\n")
            cut = False
            for _ in range(200):  # a header byte every 50 ms, never the blank line
                writer.write(b"X")
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                try:
                    data = await asyncio.wait_for(reader.read(100), 0.05)
                except TimeoutError:
                    continue
                except ConnectionError:
                    data = b""
                assert data == b""  # closed, never answered
                cut = True
                break
            assert cut
            writer.close()
            assert (await _request(http.port, _get("/healthz")))[0] == 200
        finally:
            await http.close()

    asyncio.run(asyncio.wait_for(run(), 60))


# ---- the broker adapter over a stand-in broker ----------------------------------------------


def test_broker_source_reads_slave_lags_and_readiness() -> None:
    from types import SimpleNamespace

    from rocketstore.metrics._broker_source import BrokerSource

    slave = SimpleNamespace(address="10.0.0.2:40001", lag_bytes=4096)
    flags = SimpleNamespace(is_writeable=lambda: False)
    store = SimpleNamespace(
        statistics=lambda: SimpleNamespace(ha=SimpleNamespace(slaves=(slave,))),
        running_flags=flags,
    )
    config = SimpleNamespace(broker_name="b1", namesrv_addrs=["127.0.0.1:9876"])
    broker: Any = SimpleNamespace(started=True, store=store, config=config, registrar=None)
    source = BrokerSource(broker)
    assert [(s.slave, s.lag_bytes) for s in source.slave_lags()] == [("10.0.0.2:40001", 4096)]
    reasons = source.not_ready()
    assert reasons[0].startswith("broker b1: store not writable")
    assert reasons[1] == "broker b1: not yet registered with a name server"
    flags.is_writeable = lambda: True
    broker.registrar = SimpleNamespace(last_result=object())
    assert source.not_ready() == []
