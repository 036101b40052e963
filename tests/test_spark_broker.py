"""The Spark data source through running brokers: a name server and two broker groups on
loopback (one event loop thread, started once for the module). Batch reads against what was
sent and against path mode on each broker's store, filter pushdown, streaming with
availableNow and committed consumer offsets, writes from several tasks, connection loss and a
broker stopped in the middle of a read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.spark_broker import BROKERS, QUEUES, Brokers, create_topic
from support.spark_helpers import run_query

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from rocketstore.client import MessageQueue, Producer
from rocketstore.columns._arrow import ARROW_SCHEMA
from rocketstore.remoting import RemotingClient, RemotingCommand, RequestCode, ResponseCode
from rocketstore.spark._broker import BrokerReadError, Cluster, drop_pool, pull_range
from rocketstore.spark._broker_plan import plan_remote
from rocketstore.spark._options import SourceOptions
from rocketstore.spark._path_plan import Constraints
from support.waits import wait_dispatched

PER_QUEUE = 150


def dispatched(b: Brokers) -> None:
    """Wait until every broker's dispatch has taken what was sent: a send to a new queue is
    answered before dispatch puts it where a read finds it."""
    for server in b.controllers.values():
        wait_dispatched(server.store)


def send(b: Brokers, topic: str, per_queue: int, tag: str = "t") -> dict[tuple[str, int], list]:
    """``per_queue`` messages to every queue of both groups; the bodies by (broker, queue)."""
    sent: dict[tuple[str, int], list[bytes]] = {}
    with Producer(b.ns) as p:
        for name in BROKERS:
            for q in range(QUEUES):
                bodies = [
                    f"{topic}|{name}|{q}|{i}|".encode() * (1 + i % 7) for i in range(per_queue)
                ]
                for lo in range(0, per_queue, 64):
                    p.send_batch(
                        topic, bodies[lo : lo + 64], tags=tag, queue=MessageQueue(topic, name, q)
                    )
                sent[(name, q)] = bodies
    dispatched(b)
    return sent


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Brokers]:
    b = Brokers(tmp_path_factory.mktemp("brokers"))
    try:
        for name in BROKERS:
            b.start(name)
        create_topic(b, "T")
        b.sent = send(b, "T", PER_QUEUE)  # type: ignore[attr-defined]
        yield b
    finally:
        b.stop()
        drop_pool()


def by_queue(rows: list[Any], hosts: dict[str, str]) -> dict[tuple[str, int], list[Any]]:
    out: dict[tuple[str, int], list[Any]] = {}
    for r in sorted(rows, key=lambda r: (r["store_host"], r["queue_id"], r["queue_offset"])):
        out.setdefault((hosts[r["store_host"]], r["queue_id"]), []).append(r)
    return out


def hosts_of(b: Brokers) -> dict[str, str]:
    return {c.address: name for name, c in b.controllers.items()}


def test_batch_read_equals_sent_and_path_mode(spark: Any, brokers: Brokers) -> None:
    df = (
        spark.read.format("rocketstore")
        .option("namesrv", brokers.ns)
        .option("topics", "T")
        .option("maxRowsPerPartition", "100")
        .load()
    )
    assert df.rdd.getNumPartitions() == len(BROKERS) * QUEUES * 2  # 150 offsets → 100 + 50
    rows = [r.asDict() for r in df.collect()]
    got = by_queue(rows, hosts_of(brokers))
    sent = brokers.sent  # type: ignore[attr-defined]
    assert set(got) == set(sent)
    for key, bodies in sent.items():
        assert [r["body"] for r in got[key]] == bodies  # rows and order per queue
        assert [r["queue_offset"] for r in got[key]] == list(range(PER_QUEUE))
    # the same rows as path mode on each broker's store directory
    for name in BROKERS:
        path_rows = [
            r.asDict()
            for r in spark.read.format("rocketstore")
            .option("path", str(brokers.root / name))
            .option("topics", "T")
            .load()
            .collect()
        ]
        mine = [r for r in rows if hosts_of(brokers)[r["store_host"]] == name]
        key = lambda r: (r["queue_id"], r["queue_offset"])  # noqa: E731
        assert sorted(mine, key=key) == sorted(path_rows, key=key)


def test_pushdown_of_queue_and_time(spark: Any, brokers: Brokers) -> None:
    sent = brokers.sent  # type: ignore[attr-defined]
    with RemotingClient() as c:  # a store time in the middle of broker-a's queue 1
        addr = brokers.controllers["broker-a"].address
        r = c.invoke(
            addr,
            RemotingCommand.request(
                RequestCode.PULL_MESSAGE,
                {
                    "consumerGroup": "g",
                    "topic": "T",
                    "queueId": "1",
                    "queueOffset": "100",
                    "maxMsgNums": "1",
                    "sysFlag": "4",
                    "commitOffset": "0",
                    "suspendTimeoutMillis": "0",
                    "subscription": "*",
                    "subVersion": "0",
                },
            ),
        )
        assert r.code == ResponseCode.SUCCESS
    from rocketstore.client import decode_records

    t100 = decode_records(r.body)[0].store_timestamp
    df = (
        spark.read.format("rocketstore")
        .option("namesrv", brokers.ns)
        .option("topics", "T")
        .load()
        .where("queue_id = 1 AND queue_offset >= 140")
    )
    rows = df.collect()
    assert sorted((r.queue_offset, r.body) for r in rows) == sorted(
        [(o, sent[(n, 1)][o]) for n in BROKERS for o in range(140, PER_QUEUE)]
    )
    # planning: queue and time constraints cut the plan (no partition outside them)
    opts = SourceOptions.parse({"namesrv": brokers.ns, "topics": "T"})
    with Cluster(opts.remote) as cluster:  # type: ignore[arg-type]
        cons = Constraints(queue_ids={1}, time_lo=t100)
        ranges = plan_remote(cluster, opts, cons)
    assert {(r.broker_name, r.queue_id) for r in ranges} <= {(n, 1) for n in BROKERS}
    a = [r for r in ranges if r.broker_name == "broker-a"]
    # the time search moved the start to the first message stored at or after t100 (a batch's
    # messages share a store time, and batches may share a millisecond), never past it
    store_a = brokers.controllers["broker-a"].store
    times: list[int] = []
    while len(times) <= 100:
        got = store_a.get_message("t", "T", 1, len(times), 32).messages
        assert got
        times += [m.store_timestamp for m in got]
    first = next(o for o, t in enumerate(times) if t >= t100)
    assert a and a[0].begin <= first <= 100
    assert first == 0 or a[0].begin > 0
    ts = (
        spark.read.format("rocketstore")
        .option("namesrv", brokers.ns)
        .option("topics", "T")
        .load()
        .where(f"queue_id = 1 AND store_timestamp >= timestamp_millis({t100})")
    )
    got = ts.collect()
    assert got and all(r.queue_id == 1 for r in got)
    assert all(r.store_timestamp.timestamp() * 1000 >= t100 for r in got)


def query_offset(brokers: Brokers, name: str, group: str, topic: str, q: int) -> int:
    with RemotingClient() as c:
        r = c.invoke(
            brokers.controllers[name].address,
            RemotingCommand.request(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": group, "topic": topic, "queueId": str(q)},
            ),
        )
    if r.code != ResponseCode.SUCCESS:
        return -1
    return int(r.ext_fields["offset"])


def test_stream_available_now_twice_and_committed_offsets(
    spark: Any, brokers: Brokers, tmp_path: Path
) -> None:
    create_topic(brokers, "S")
    first = send(brokers, "S", 20)
    out = tmp_path / "out"
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        stream = (
            spark.readStream.format("rocketstore")
            .option("namesrv", brokers.ns)
            .option("topics", "S")
            .option("startingOffsets", "earliest")
            .option("consumerGroup", "spark-g")
            .option("commitOffsets", "true")
            .option("maxOffsetsPerTrigger", "100")
            .load()
            .selectExpr("queue_id", "queue_offset", "body", "store_host")
        )
        run_query(
            lambda: (
                stream.writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
        )

    run()
    rows = spark.read.parquet(str(out)).collect()
    assert sorted(r.body for r in rows) == sorted(b for bs in first.values() for b in bs)
    second = send(brokers, "S", 5)
    run()
    rows = spark.read.parquet(str(out)).collect()
    everything = [b for d in (first, second) for bs in d.values() for b in bs]
    assert sorted(r.body for r in rows) == sorted(everything)  # nothing read twice
    # Spark hands a micro-batch's end to the source's commit when it plans the next batch
    # (or the query restarts): the group's offsets trail by a micro-batch; after the second
    # run they are where the first one ended
    for name in BROKERS:
        for q in range(QUEUES):
            assert query_offset(brokers, name, "spark-g", "S", q) == 20


def test_write_from_several_tasks_then_read_back(spark: Any, brokers: Brokers) -> None:
    create_topic(brokers, "W")
    data = [("W", f"w-{i}".encode(), f"k{i % 3}", i % 2) for i in range(600)]
    df = spark.createDataFrame(data, "topic string, body binary, tags string, flag int")
    (
        df.repartition(3)
        .select("topic", "body", "tags")
        .write.format("rocketstore")
        .option("namesrv", brokers.ns)
        .option("sendBatchRows", "25")
        .mode("append")
        .save()
    )
    dispatched(brokers)
    back = (
        spark.read.format("rocketstore")
        .option("namesrv", brokers.ns)
        .option("topics", "W")
        .load()
        .select("body", "tags", "queue_id", "store_host")
        .collect()
    )
    assert sorted((r.body, r.tags) for r in back) == sorted((b, t) for _, b, t, _ in data)
    used = {(hosts_of(brokers)[r.store_host], r.queue_id) for r in back}
    assert len(used) == len(BROKERS) * QUEUES  # spread over every queue of both groups
    # a row's queue_id picks the queue (an index into the write queues: broker-a's first)
    one = spark.createDataFrame([("W", b"pinned", 2)], "topic string, body binary, queue_id int")
    one.write.format("rocketstore").option("namesrv", brokers.ns).mode("append").save()
    pinned = (
        spark.read.format("rocketstore")
        .option("namesrv", brokers.ns)
        .option("topics", "W")
        .load()
        .where("body = X'70696E6E6564'")
        .collect()
    )
    assert [(hosts_of(brokers)[r.store_host], r.queue_id) for r in pinned] == [("broker-a", 2)]


def test_export_and_import_commands_with_namesrv(
    spark: Any, brokers: Brokers, tmp_path: Path
) -> None:
    """Without Spark and with it: the same rows exported, every row imported."""
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from rocketstore.cli import main

    cli = CliRunner()
    sent = brokers.sent  # type: ignore[attr-defined]
    exported = []
    for n, engine in enumerate(((), ("--spark",))):
        out = tmp_path / f"t{n}"
        args = ["export", "--namesrv", brokers.ns, "--topic", "T", "--to", str(out), *engine]
        r = cli.invoke(main, args)
        assert r.exit_code == 0, r.output
        assert f'"exported": {len(BROKERS) * QUEUES * PER_QUEUE}' in r.output
        order = [(c, "ascending") for c in ("store_host", "queue_id", "queue_offset")]
        exported.append(pq.read_table(out).sort_by(order).to_pylist())
        topic = f"I{n}"
        create_topic(brokers, topic)
        args = ["import", "--namesrv", brokers.ns, "--from", str(out), "--topic", topic, *engine]
        r = cli.invoke(main, args)
        assert r.exit_code == 0, r.output
        dispatched(brokers)
        back = (
            spark.read.format("rocketstore")
            .option("namesrv", brokers.ns)
            .option("topics", topic)
            .load()
        )
        assert sorted(r.body for r in back.select("body").collect()) == sorted(
            b for bs in sent.values() for b in bs
        )
    assert exported[0] == exported[1]
    r = cli.invoke(main, ["export", "--namesrv", brokers.ns, "--to", str(tmp_path / "x")])
    assert r.exit_code != 0 and "--namesrv needs --topic" in r.output


def test_connection_loss_retries_and_stopped_broker(brokers: Brokers) -> None:
    opts = SourceOptions.parse(
        {"namesrv": brokers.ns, "topics": "T", "pullBatchSize": "20", "pullRetries": "1"}
    )
    assert opts.remote is not None
    with Cluster(opts.remote) as cluster:
        ranges = [r for r in plan_remote(cluster, opts) if r.broker_name == "broker-a"]
    r = ranges[0]
    reading = pull_range(
        r, opts.remote, ARROW_SCHEMA, batch_rows=40, check_crc=True, fail_on_data_loss=True
    )
    got = [next(reading)]
    drop_pool()  # the connections go away mid-read: the next pull reconnects, same offsets
    got.extend(reading)
    offsets = [o for b in got for o in b.column("queue_offset").to_pylist()]
    assert offsets == list(range(r.begin, r.end))
    # option broker (no name server): the queues of that broker, named as the broker says
    one = SourceOptions.parse({"broker": brokers.controllers["broker-b"].address, "topics": "T"})
    assert one.remote is not None
    with Cluster(one.remote) as cluster:
        planned = plan_remote(cluster, one)
    assert {(p.broker_name, p.queue_id, p.begin, p.end) for p in planned} == {
        ("broker-b", q, 0, PER_QUEUE) for q in range(QUEUES)
    }
    # a broker group stopped in the middle of a read: a clear error after the retries
    brokers.start("broker-c")
    create_topic(brokers, "C", ("broker-c",))
    with Producer(brokers.ns) as p:
        p.send_batch("C", [b"c"] * 100, queue=MessageQueue("C", "broker-c", 0))
    wait_dispatched(brokers.controllers["broker-c"].store)
    opts = SourceOptions.parse(
        {"namesrv": brokers.ns, "topics": "C", "pullBatchSize": "10", "pullRetries": "1"}
    )
    assert opts.remote is not None
    with Cluster(opts.remote) as cluster:
        (r,) = [r for r in plan_remote(cluster, opts) if r.queue_id == 0]
    reading = pull_range(
        r, opts.remote, ARROW_SCHEMA, batch_rows=10, check_crc=True, fail_on_data_loss=True
    )
    assert next(reading).num_rows == 10
    brokers.stop_broker("broker-c")
    with pytest.raises(BrokerReadError, match=r"C/broker-c/0: pulling offset 10 failed 2 times"):
        list(reading)
