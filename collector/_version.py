"""The one place the version of dslogs is written: both distributions (dslogs-llm and
dslogs-collector) read it when built, and `dslogs --version` prints it."""

__version__ = "0.1.0"
