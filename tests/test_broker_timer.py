"""RocketMQ 5 clients' timer messages through the remoting front end: TIMER_DELAY_SEC,
TIMER_DELAY_MS and TIMER_DELIVER_MS become an exact delivery time, delivered by the store's
schedule through its delay levels, never early; bad values are refused."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from rocketstore.remoting import RemotingClient
from rocketstore.remoting._codes import RequestCode
from rocketstore.remoting._codes import ResponseCode as RC
from rocketstore.remoting._command import RemotingCommand
from rocketstore.store.log._record import MessageExt, properties_to_string
from support.grpc_broker import BrokerThread


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path_factory.mktemp("timer-broker"))
    try:
        yield b.start()
    finally:
        b.close()


def send(b: BrokerThread, topic: str, body: bytes, props: dict[str, str]) -> RemotingCommand:
    header = {
        "producerGroup": "TimerPG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": str(int(time.time() * 1000)),
        "flag": "0",
        "properties": properties_to_string({"UNIQ_KEY": f"U{time.time_ns()}", **props}),
        "reconsumeTimes": "0",
    }
    with RemotingClient(timeout=60) as client:
        return client.invoke(
            b.broker.address, RemotingCommand.request(RequestCode.SEND_MESSAGE, header, body)
        )


def delivered(b: BrokerThread, topic: str) -> list[MessageExt]:
    return b.run(lambda: list(b.broker.store.get_message("t", topic, 0, 0, 8).messages))


@pytest.mark.parametrize(
    ("prop", "value", "delay_ms"),
    [
        ("TIMER_DELAY_SEC", "2", 2000),
        ("TIMER_DELAY_MS", "1500", 1500),
        ("TIMER_DELIVER_MS", "", 1800),
    ],
)
def test_timer_message_is_delivered_at_its_time(
    broker: BrokerThread, prop: str, value: str, delay_ms: int
) -> None:
    topic = f"Timer{prop.replace('_', '')}"
    begin = int(time.time() * 1000)
    r = send(broker, topic, b"on-time", {prop: value or str(begin + delay_ms)})
    sent = int(time.time() * 1000)
    assert r.code == RC.SUCCESS, r.remark
    deadline = time.monotonic() + 60
    while not (got := delivered(broker, topic)) and time.monotonic() < deadline:
        time.sleep(0.05)
    (m,) = got
    deliver = int(m.properties["TIMER_DELIVER_MS"])
    assert begin + delay_ms <= deliver <= sent + delay_ms  # its delay from when it arrived
    assert deliver <= m.store_timestamp  # never early (how late depends on the machine's load)
    assert "TIMER_DELAY_SEC" not in m.properties and "TIMER_DELAY_MS" not in m.properties


def test_bad_timer_values_are_refused(broker: BrokerThread) -> None:
    for props in (
        {"TIMER_DELAY_SEC": "soon"},
        {"TIMER_DELIVER_MS": "12x"},
        {"TIMER_DELAY_SEC": str(4 * 86_400)},  # over RocketMQ 5's 3-day limit
    ):
        r = send(broker, "TimerBad", b"x", props)
        assert r.code == RC.MESSAGE_ILLEGAL, (props, r.remark)
    assert send(broker, "TimerBad", b"fine", {}).code == RC.SUCCESS
