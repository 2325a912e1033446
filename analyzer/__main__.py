"""``python -m dslogs``: the ``dslogs`` command line."""

from dslogs.analyzer.cli import main

main()
