"""Prometheus metrics and health endpoints for rocketstore's servers: RocketMQ 5.1's broker
metric names and labels on ``/metrics``, ``/healthz`` and ``/readyz`` on the same port.

Errors: ``MetricsUnavailableError`` (prometheus_client missing), ``MetricsListenError`` (a
listen address that is not HOST:PORT).
"""

from ._collector import RocketMQCollector as RocketMQCollector
from ._http import MetricsHttpServer as MetricsHttpServer
from ._server import DEFAULT_METRICS_LISTEN as DEFAULT_METRICS_LISTEN
from ._server import MetricsListenError as MetricsListenError
from ._server import MetricsServer as MetricsServer
from ._server import MetricsUnavailableError as MetricsUnavailableError
from ._server import default_metrics_listen as default_metrics_listen
from ._server import maybe_start_metrics as maybe_start_metrics
from ._server import parse_listen as parse_listen
from ._server import start_metrics as start_metrics
from ._source import ConsumerConnections as ConsumerConnections
from ._source import ConsumerLag as ConsumerLag
from ._source import HistogramData as HistogramData
from ._source import MetricsSource as MetricsSource
from ._source import NamesrvSource as NamesrvSource
from ._source import Node as Node
from ._source import ProducerConnections as ProducerConnections
from ._source import SlaveLag as SlaveLag
from ._source import Storage as Storage
from ._source import StoreFiles as StoreFiles
from ._source import TopicTraffic as TopicTraffic

__all__ = [
    "DEFAULT_METRICS_LISTEN",
    "ConsumerConnections",
    "ConsumerLag",
    "HistogramData",
    "MetricsHttpServer",
    "MetricsListenError",
    "MetricsServer",
    "MetricsSource",
    "MetricsUnavailableError",
    "NamesrvSource",
    "Node",
    "ProducerConnections",
    "RocketMQCollector",
    "SlaveLag",
    "Storage",
    "StoreFiles",
    "TopicTraffic",
    "default_metrics_listen",
    "maybe_start_metrics",
    "parse_listen",
    "start_metrics",
]
