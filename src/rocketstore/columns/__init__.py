"""Messages as Arrow columns: the row schema (``_schema``), the whole-batch kernels that decode
the records of a run (``_kernels``) and the decoder of queue ranges into record batches
(``_arrow``). Used by the Spark data source and by the tiered store."""
