"""The ``rocketstore`` PySpark data source (needs the ``spark`` extra: pyspark and pyarrow).

``spark.read.format("rocketstore")`` works without registering anything once rocketstore is
installed (Spark finds the top-level ``pyspark_rocketstore`` module); to register by hand::

    from rocketstore.spark import RocketStoreDataSource
    spark.dataSource.register(RocketStoreDataSource)

pyspark is imported on first use of ``RocketStoreDataSource``, so importing this package (or
rocketstore itself) never needs it.

``read_topic`` reads a topic from its tiered store (Parquet) and the store as one DataFrame;
``tier_snapshot`` (``tier_files``, ``tiered_boundary``) gives the tier's files and a stream's
starting offsets past them (docs/spark.md, "Reading a tiered topic").

``ExactlyOnceChecks`` answers the brokers' checks of exactly-once writes' half messages from
their decision records (docs/spark.md, "Exactly-once through brokers").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._eos_checks import ExactlyOnceChecks as ExactlyOnceChecks
    from ._source import RocketStoreDataSource as RocketStoreDataSource
    from ._tiered import TierSnapshot as TierSnapshot
    from ._tiered import read_topic as read_topic
    from ._tiered import tier_files as tier_files
    from ._tiered import tier_snapshot as tier_snapshot
    from ._tiered import tiered_boundary as tiered_boundary

__all__ = [
    "ExactlyOnceChecks",
    "RocketStoreDataSource",
    "TierSnapshot",
    "read_topic",
    "tier_files",
    "tier_snapshot",
    "tiered_boundary",
]
_TIERED = frozenset(
    {"TierSnapshot", "read_topic", "tier_files", "tier_snapshot", "tiered_boundary"}
)


def __getattr__(name: str) -> Any:
    if name == "RocketStoreDataSource":
        from ._source import RocketStoreDataSource

        return RocketStoreDataSource
    if name == "ExactlyOnceChecks":
        from ._eos_checks import ExactlyOnceChecks

        return ExactlyOnceChecks
    if name in _TIERED:
        from . import _tiered

        return getattr(_tiered, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
