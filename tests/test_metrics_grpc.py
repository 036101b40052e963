"""Metrics of messages received through the gRPC front end: handed out (messages out) and,
until acknowledged, in flight."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from rocketstore.grpc._pb import service_pb2_grpc
from rocketstore.metrics._broker_source import BrokerSource
from support.grpc_broker import BrokerThread, ack, receive_all, send_ok


@pytest.fixture
def broker(tmp_path: Any) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path).start()  # its front end hands the broker its pop state
    try:
        yield b
    finally:
        b.close()


def test_grpc_receive_counts_out_and_in_flight(broker: BrokerThread) -> None:
    channel = grpc.insecure_channel(broker.grpc_address)
    try:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        for i in range(3):
            send_ok(stub, "TG", b"m%d" % i)
        got, _ = receive_all(stub, "GG", "TG", 3)  # what had reached the queue, until all
        assert len(got) == 3
        source = BrokerSource(broker.broker)
        (out,) = broker.run(source.messages_out)
        assert (out.topic, out.consumer_group, out.messages) == ("TG", "GG", 3)
        stored = broker.run(lambda: broker.broker.store.statistics().topics["TG"])
        assert out.bytes == stored.bytes  # the records as stored
        assert _inflight(broker, source) == 3
        ack(stub, "GG", "TG", got[0].system_properties.receipt_handle)
        assert _inflight(broker, source) == 2
    finally:
        channel.close()


def _inflight(broker: BrokerThread, source: BrokerSource) -> int:
    (lag,) = [
        lag
        for lag in broker.run(source.consumer_lags)
        if (lag.topic, lag.consumer_group) == ("TG", "GG")
    ]
    return lag.inflight_messages
