"""The ``rocketstore`` PySpark data source (needs the ``spark`` extra: pyspark and pyarrow).

``spark.read.format("rocketstore")`` works without registering anything once rocketstore is
installed (Spark finds the top-level ``pyspark_rocketstore`` module); to register by hand::

    from rocketstore.spark import RocketStoreDataSource
    spark.dataSource.register(RocketStoreDataSource)

pyspark is imported on first use of ``RocketStoreDataSource``, so importing this package (or
rocketstore itself) never needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._source import RocketStoreDataSource as RocketStoreDataSource

__all__ = ["RocketStoreDataSource"]


def __getattr__(name: str) -> Any:
    if name == "RocketStoreDataSource":
        from ._source import RocketStoreDataSource

        return RocketStoreDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
