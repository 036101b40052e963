"""The tiered store: messages of sealed commit-log files kept as Parquet, per topic, with a
manifest per topic (``_manifest``), so they outlive the commit log's retention and Spark reads
them natively.

Writing side: ``_writer.tier_range`` (one commit-log range), ``_service.TierService`` (the
thread a broker runs with ``tiered_dir`` set), ``_retention.enforce_retention``,
``_service.tier_store`` (a whole store no broker runs). This package exports nothing itself, so
importing ``_manifest`` needs no pyarrow; the writing modules do (the ``spark`` extra).
"""
