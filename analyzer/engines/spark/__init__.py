"""The Spark engine (``--engine spark``): the DuckDB analysis, distributed by host."""
