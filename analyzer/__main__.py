"""``python -m dslogs.analyzer`` (and, in a checkout, ``python -m analyzer``, which the benches run
against older trees too): the ``dslogs`` command line, as ``python -m dslogs``."""

from dslogs.analyzer.cli import main

main()
