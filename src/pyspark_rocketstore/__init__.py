"""Spark's entry point to the rocketstore data source.

Spark imports every installed top-level module named ``pyspark_*`` and registers its
``DefaultSource`` under ``DefaultSource.name()`` ("rocketstore"), so
``spark.read.format("rocketstore")`` needs no register call.
"""

from rocketstore.spark._source import RocketStoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
