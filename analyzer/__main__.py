"""``python -m analyzer``: the ``dslogs`` command line."""

from analyzer.cli import main

main()
