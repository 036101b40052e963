"""The tiered store: messages of sealed commit-log files kept as Parquet, per topic, with a
manifest per topic (``_manifest``), so they outlive the commit log's retention and Spark reads
them natively."""
