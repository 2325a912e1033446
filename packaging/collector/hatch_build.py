"""Ship ../../collector (the repository's one copy) as the package `collector`.

In a checkout the sources are two levels up; in this distribution's sdist they were copied
next to this file. Files are added one by one (*.py and the schema JSON), so a __pycache__ or
editor file in the checkout never reaches the wheel."""

from __future__ import annotations

import os

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SHIPPED_SUFFIXES = (".py", ".json")


class CollectorSourcesHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        src = os.path.join(self.root, "collector")
        if not os.path.isfile(os.path.join(src, "tracer.py")):
            src = os.path.normpath(os.path.join(self.root, "..", "..", "collector"))
        if not os.path.isfile(os.path.join(src, "tracer.py")):
            raise FileNotFoundError(f"collector sources not found next to {self.root} or two levels up")
        for name in sorted(os.listdir(src)):
            if name.endswith(SHIPPED_SUFFIXES):
                build_data["force_include"][os.path.join(src, name)] = f"collector/{name}"
