"""What a topic, a queue, a connection and a subscription cost the broker in memory.

    python benchmarks/scale_memory.py [--topics 4000] [--queues-topics 500] [--clients 2000]
        [--subscriptions 4]

Each figure is the growth of Python's heap (``tracemalloc``) over the step, divided by what the
step added; queues also by the growth of the resident set (a queue's first message maps its
consume-queue file and touches a page of it):

- a topic: its entry in the broker's topic table (8 queues) and in the name server's routes;
- a queue: the store's consume queue made by its first message (``--queues-topics`` topics of
  8 queues, one message each), Python heap and resident set;
- a connection: a client record in a consumer group or a producer group (the connection
  object and its buffers are the remoting server's: ``benchmarks/scale.py`` measures the
  whole process);
- a subscription: one more topic in a consumer group's subscription table.

In-process, pure bookkeeping: no network. A figure is bytes (``B``).
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.broker.state._consumer_manager import ConsumerManager, ProducerManager
from rocketstore.broker.state._topic_config import TopicConfig, TopicConfigManager
from rocketstore.namesrv._route_table import RouteInfoManager
from rocketstore.protocol._heartbeat import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    build_subscription,
)
from rocketstore.protocol._namesrv_bodies import DataVersion, TopicConfigWrapper


def heap() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def per_topic(n: int, config_dir: Path) -> dict[str, float]:
    topics = TopicConfigManager(config_dir, "broker-a")
    before = heap()
    for i in range(n):
        topics.update(TopicConfig(f"SizeTopic{i}", 8, 8))
    topics.wait_compacted()
    table = heap() - before
    routes = RouteInfoManager()
    routes.register_broker("C", "127.0.0.1:1", "broker-a", 0, "127.0.0.1:2", None)
    before = heap()
    wrapper = TopicConfigWrapper(
        DataVersion(1, 1),
        {f"SizeTopic{i}": TopicConfig(f"SizeTopic{i}", 8, 8).to_json() for i in range(n)},
    )
    routes.register_broker("C", "127.0.0.1:1", "broker-a", 0, "127.0.0.1:2", wrapper)
    del wrapper
    named = heap() - before
    return {"topic_in_broker_table_B": table / n, "topic_in_name_server_B": named / n}


def per_queue(topics: int, root: Path) -> dict[str, float]:
    store = MessageStore(StoreConfig(store_path_root_dir=str(root)))
    store.load()
    store.start()
    try:
        store.put_message(Message("Warm", b"x" * 100, 0))
        queues = topics * 8
        before, before_rss = heap(), rss_kib()
        for t in range(topics):
            for q in range(8):
                store.put_message(Message(f"SizeQueue{t}", b"x" * 100, q))
        for _ in range(6000):  # dispatched: every queue made (at most a minute)
            if store.dispatch_behind_bytes() <= 0:
                break
            time.sleep(0.01)
        return {
            "queue_heap_B": (heap() - before) / queues,
            "queue_rss_B": 1024 * (rss_kib() - before_rss) / queues,
        }
    finally:
        store.shutdown()


def per_client(n: int, subs: int) -> dict[str, float]:
    consumers: ConsumerManager[Any] = ConsumerManager()
    producers: ProducerManager[Any] = ProducerManager()
    channels = [object() for _ in range(n)]
    one = [build_subscription("SizeTopic", "*", sub_version=1)]
    before = heap()
    for i, ch in enumerate(channels):
        consumers.register_consumer(
            f"G{i // 100}",
            ch,
            f"127.0.0.1@client-{i}",
            ConsumeType.CONSUME_PASSIVELY,
            MessageModel.CLUSTERING,
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            one,
        )
    consumer = (heap() - before) / n
    before = heap()
    for i, ch in enumerate(channels):
        producers.register_producer(f"P{i // 100}", ch, f"127.0.0.1@client-{i}")
    producer = (heap() - before) / n
    groups = max(1, n // 100)
    before = heap()
    for g in range(groups):
        many = [build_subscription("SizeTopic", "*", sub_version=1)] + [
            build_subscription(f"SizeTopic{k}", "TagA || TagB", sub_version=1)
            for k in range(1, subs)
        ]
        consumers.register_consumer(
            f"G{g}",
            channels[g * 100],
            f"127.0.0.1@client-{g * 100}",
            ConsumeType.CONSUME_PASSIVELY,
            MessageModel.CLUSTERING,
            ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
            many,
        )
    subscription = (heap() - before) / (groups * max(1, subs - 1))
    return {
        "consumer_record_B": consumer,
        "producer_record_B": producer,
        "subscription_B": subscription,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=4000)
    ap.add_argument("--queues-topics", type=int, default=500)
    ap.add_argument("--clients", type=int, default=2000)
    ap.add_argument("--subscriptions", type=int, default=4)
    args = ap.parse_args()
    tracemalloc.start()
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        per_topic(200, Path(scratch) / "warm-up")  # one-time allocations, not a topic's
        out.update(per_topic(args.topics, Path(scratch) / "config"))
        out.update(per_client(args.clients, args.subscriptions))
        out.update(per_queue(args.queues_topics, Path(scratch) / "store"))
    for key, value in out.items():
        print(f"{key:32} {value:10.0f}")


if __name__ == "__main__":
    main()
