"""The ``rocketstore`` PySpark data source: batch and streaming reads of store directories,
batch and streaming writes into an embedded store; with option ``namesrv`` or ``broker`` the
same through running brokers.

::

    _source (the DataSource: picks a mode)
      ├─ _path_reader / _broker_reader     _path_writer / _broker_writer
      │    ├─ _pushdown (filters → Constraints)       └─ _write_common (schema check, task index)
      │    ├─ _path_plan / _broker_plan ─ _broker (cluster, pulls)
      │    └─ _arrow (decoding)
      └─ _options (every option parsed once; imports nothing else of spark/)

Column pruning: ``reader(schema)`` / ``streamReader(schema)`` get the schema Spark plans with:
the user's ``.schema(...)``, else ``schema()``, which is the ``columns`` option's selection or
every column. Any subset of the columns in any order is read, and only those are decoded.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from ..columns._arrow import select_schema
from ..columns._schema import SCHEMA_DDL, schema_ddl
from ._options import SourceOptionError, SourceOptions, _bool, is_remote
from ._path_reader import BatchReader, PushdownBatchReader, StreamReader

NAME = "rocketstore"


def arrow_schema(schema: StructType, opts: SourceOptions) -> pa.Schema:
    """The Arrow schema of a read with Spark schema ``schema`` (checked at planning: every
    field a rocketstore column of its type; the same columns as option columns, if given)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    names = tuple(schema.fieldNames())
    if opts.columns is not None and names != opts.columns:
        raise SourceOptionError(
            f"option columns ({', '.join(opts.columns)}) and the schema of the read "
            f"({', '.join(names)}) name different columns; give one of them"
        )
    return select_schema(list(to_arrow_schema(schema, timezone="UTC")))


class RocketStoreDataSource(DataSource):
    """``spark.read.format("rocketstore").option("path", DIR)`` (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        """Every column, or the ones option ``columns`` names (in its order)."""
        opts = SourceOptions.parse(self.options)
        return schema_ddl(opts.columns) if opts.columns else SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = SourceOptions.parse(self.options)
        arrow = arrow_schema(schema, opts)
        pushdown = _pushdown_allowed(opts.push_filters)
        if opts.remote is not None:
            from ._broker_reader import BrokerBatchReader, BrokerPushdownReader

            return (BrokerPushdownReader if pushdown else BrokerBatchReader)(opts, arrow)
        if pushdown:
            return PushdownBatchReader(opts, arrow)
        return BatchReader(opts, arrow)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = SourceOptions.parse(self.options, streaming=True)
        if opts.remote is not None:
            from ._broker_reader import BrokerStreamReader

            return BrokerStreamReader(opts, arrow_schema(schema, opts))
        return StreamReader(opts, arrow_schema(schema, opts))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from ._broker_writer import RemoteBatchWriter

        if is_remote(self.options):
            return _exactly_once_writer(dict(self.options), schema, overwrite, False) or (
                RemoteBatchWriter(dict(self.options), schema, overwrite)
            )
        once = _store_once_writer(dict(self.options), schema, False, overwrite)
        if once is not None:
            return once
        from ._path_writer import BatchWriter

        return BatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from ._broker_writer import RemoteStreamWriter

        if is_remote(self.options):
            return _exactly_once_writer(dict(self.options), schema, overwrite, True) or (
                RemoteStreamWriter(dict(self.options), schema, overwrite)
            )
        once = _store_once_writer(dict(self.options), schema, True, overwrite)
        if once is not None:
            return once
        from ._path_writer import StreamWriter

        return StreamWriter(dict(self.options), schema, overwrite)


def _exactly_once_writer(
    options: dict[str, str], schema: StructType, overwrite: bool, streaming: bool
) -> Any:
    """The exactly-once writer through brokers when option exactlyOnce is true, else None
    (the at-least-once writers, untouched)."""
    if not _bool(options, "exactlyOnce", False):
        return None
    from ._broker_writer import remote_write_settings
    from ._eos_writer import ExactlyOnceBatchWriter, ExactlyOnceStreamWriter

    if overwrite:
        raise SourceOptionError("rocketstore topics are append-only: use mode('append')")
    settings = remote_write_settings(options, schema)
    if streaming:
        return ExactlyOnceStreamWriter(options, settings)
    return ExactlyOnceBatchWriter(options, settings)


def _store_once_writer(
    options: dict[str, str], schema: StructType, streaming: bool, overwrite: bool
) -> Any:
    """The exactly-once writer into a store path when option exactlyOnce is true, else None
    (the at-least-once writers, untouched)."""
    if not _bool(options, "exactlyOnce", False):
        return None
    if overwrite:
        raise SourceOptionError("rocketstore topics are append-only: use mode('append')")
    from ._eos_writer import StoreOnceBatchWriter, StoreOnceStreamWriter
    from ._store_write import store_write_settings
    from ._write_common import check_schema

    settings = store_write_settings(options, check_schema(schema))
    if streaming:
        return StoreOnceStreamWriter(options, settings)
    return StoreOnceBatchWriter(options, settings)


def _pushdown_allowed(setting: str) -> bool:
    """Whether the reader may implement ``pushFilters``.

    Spark refuses a reader that implements pushFilters when
    ``spark.sql.python.filterPushdown.enabled`` is false, and the reader cannot see the conf.
    The planner that runs without pushdown keeps the conf value in a local of the function
    that calls ``DataSource.reader``; with option pushFilters=auto (the default) that frame
    decides. pushFilters=true / false overrides it.
    """
    if setting != "auto":
        return setting == "true"
    frame: FrameType | None = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            break
        if frame.f_code.co_filename.endswith("plan_data_source_read.py"):
            return bool(frame.f_locals.get("enable_pushdown", True))
        frame = frame.f_back
    return True
