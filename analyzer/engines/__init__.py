"""Engines that run the metric queries over opened logs: the contract, DuckDB, Spark."""
