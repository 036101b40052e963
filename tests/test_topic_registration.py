"""A created topic is registered with the name server alone (an incremental registration) and
the name server keeps every other topic of the broker; a whole registration after increments
gives the same routes; a name server that forgot the broker hears the whole table again."""

from __future__ import annotations

from typing import Any

from rocketstore.client._admin import AdminClient
from support.waits import wait_until

TOPICS = 120


def queue_table(cluster: Any, broker: str, topics: list[str]) -> dict[str, tuple[int, int]]:
    """topic → (read, write) queue counts the name server holds for ``broker``."""
    assert cluster.ns is not None
    routes = cluster.ns.routes
    out: dict[str, tuple[int, int]] = {}
    for topic in topics:
        data = routes.topic_queue_datas(topic).get(broker)
        if data is not None:
            out[topic] = (data.read_queue_nums, data.write_queue_nums)
    return out


def test_incremental_registration_keeps_every_topic(cluster: Any, admin: AdminClient) -> None:
    addr = cluster.addr("broker-a")
    registrar = cluster.brokers["broker-a"].registrar
    increments_before = registrar.sent["increment"]
    names = [f"IncTopic{i}" for i in range(TOPICS)]
    want = {}
    for i, topic in enumerate(names):
        queues = i % 8 + 1
        admin.create_topic(addr, topic, read_queue_nums=queues, write_queue_nums=queues)
        want[topic] = (queues, queues)
    assert wait_until(lambda: queue_table(cluster, "broker-a", names) == want, 120.0), len(
        queue_table(cluster, "broker-a", names)
    )
    # the creates went as increments, not as the whole table each
    assert registrar.sent["increment"] > increments_before
    # every route query answers with the right queues
    for topic in names[:: TOPICS // 10]:
        route = cluster.route(topic)
        assert route is not None
        assert [(q.broker_name, q.read_queue_nums) for q in route.queue_datas] == [
            ("broker-a", want[topic][0])
        ]
    assert set(names) <= set(admin.topic_list())

    # a change of one topic's queues goes as an increment too, the others stay
    admin.create_topic(addr, names[0], read_queue_nums=16, write_queue_nums=16)
    want[names[0]] = (16, 16)
    assert wait_until(lambda: queue_table(cluster, "broker-a", names) == want, 120.0)

    # the whole table registered after the increments gives the same routes
    whole_before = registrar.sent["whole"]
    cluster.run(registrar.register_all())
    assert registrar.sent["whole"] == whole_before + 1
    assert queue_table(cluster, "broker-a", names) == want
    # the other broker's routes never got these topics
    assert queue_table(cluster, "broker-b", names) == {}


def test_a_name_server_that_forgot_the_broker_gets_the_whole_table(
    cluster: Any, admin: AdminClient
) -> None:
    addr = cluster.addr("broker-b")
    names = [f"Forgot{i}" for i in range(20)]
    for topic in names:
        admin.create_topic(addr, topic, read_queue_nums=2, write_queue_nums=2)
    assert wait_until(lambda: len(queue_table(cluster, "broker-b", names)) == len(names), 120.0)

    # the name server drops the broker when its connection closes
    channel = cluster.ns.routes.channel_of(addr)
    assert channel is not None
    cluster.loop.call_soon_threadsafe(channel.close)
    assert wait_until(lambda: addr not in cluster.ns.routes.live_brokers(), 60.0)
    assert queue_table(cluster, "broker-b", names) == {}

    # the next create is the first thing it hears over a new connection: the whole table
    admin.create_topic(addr, "ForgotLast", read_queue_nums=3, write_queue_nums=3)
    every = [*names, "ForgotLast"]
    want = {t: (2, 2) for t in names} | {"ForgotLast": (3, 3)}
    assert wait_until(lambda: queue_table(cluster, "broker-b", every) == want, 120.0)
    assert addr in cluster.ns.routes.live_brokers()


def test_periodic_round_skips_a_current_name_server(cluster: Any, admin: AdminClient) -> None:
    registrar = cluster.brokers["broker-a"].registrar
    cluster.run(registrar.register_all())  # the name server now holds the current version
    sent = dict(registrar.sent)
    cluster.run(registrar._round("periodic"))
    assert registrar.sent["skipped"] == sent["skipped"] + 1
    assert registrar.sent["whole"] == sent["whole"]
    # a version the name server does not have: the whole table
    cluster.brokers["broker-a"].topics.next_version()
    cluster.run(registrar._round("periodic"))
    assert registrar.sent["whole"] == sent["whole"] + 1
