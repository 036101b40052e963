"""The metrics tests' stand-ins: a broker state source and a name server that answer what the
metrics collectors ask; where Prometheus is installed."""

from __future__ import annotations

from collections.abc import Sequence

from rocketstore.metrics import (
    ConsumerConnections,
    ConsumerLag,
    HistogramData,
    Node,
    ProducerConnections,
    SlaveLag,
    Storage,
    StoreFiles,
    TopicTraffic,
)

PROMETHEUS = "/usr/bin/prometheus"


class FakeSource:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def node(self) -> Node:
        return Node("C1", "b1")

    def messages_in(self) -> Sequence[TopicTraffic]:
        return [TopicTraffic("T", 3, 300, message_type="delay")]

    def messages_out(self) -> Sequence[TopicTraffic]:
        return [TopicTraffic("T", 2, 200, consumer_group="G", is_system=True)]

    def message_sizes(self) -> Sequence[HistogramData]:
        labels = (("is_system", "false"), ("message_type", "normal"), ("topic", "T"))
        return [HistogramData(labels, (1024.0, 4096.0), (2, 1, 0), 3000.0)]

    def rpc_latency(self) -> Sequence[HistogramData]:
        labels = (
            ("result", "success"),
            ("request_code", "pull_message"),
            ("response_code", "success"),
            ("is_long_polling", "true"),
        )
        return [HistogramData(labels, (1.0,), (1, 1), 7.5)]

    def consumer_lags(self) -> Sequence[ConsumerLag]:
        return [ConsumerLag("%RETRY%G", "G", 4, 1, 50, is_retry=True)]

    def producer_connections(self) -> Sequence[ProducerConnections]:
        return [ProducerConnections("java", "409", 1)]

    def consumer_connections(self) -> Sequence[ConsumerConnections]:
        return [ConsumerConnections("G", "java", "409", "push", 2)]

    def topic_number(self) -> int:
        return 7

    def consumer_group_number(self) -> int:
        return 2

    def storage(self) -> Storage:
        return Storage(10, 2, 1)

    def store_files(self) -> StoreFiles:
        return StoreFiles(4, 30, 3, 16, 27, 40, 1024, 300, 65530)

    def slave_lags(self) -> Sequence[SlaveLag]:
        return [SlaveLag("127.0.0.1:1", 5)]

    def ha_refused_peers(self) -> int:
        return 4

    def replica(self) -> None:
        return None

    def not_ready(self) -> Sequence[str]:
        return self.reasons


class FakeNamesrv:
    def live_brokers(self) -> int:
        return 3

    def not_ready(self) -> Sequence[str]:
        return []
