"""Use cases: what each command does, from a ``core.selection.Selection`` to a model.

analyze, capacity, diff and weekly open the logs through the engine contract (or ``ingest.open``)
and hand the tables to ``dslogs.analyzer.model``, which builds models and nothing else; the command line
and the Python API call these functions and pick a renderer. One place says what an empty window
means (``window.empty_window_note``), for every command.
"""
