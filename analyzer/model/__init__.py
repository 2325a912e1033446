"""The report model dslogs.report/1: build, diff, the result cache, JSON load and save."""
