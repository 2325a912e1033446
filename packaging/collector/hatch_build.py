"""Ship ../../collector (the repository's one copy) as the package `dslogs_collector`.

In a checkout the sources are two levels up; in this distribution's sdist they were copied
next to this file. Files are added one by one (*.py and the schema JSON), so a __pycache__ or
editor file in the checkout never reaches the wheel."""

from __future__ import annotations

import os
import re

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.metadata.plugin.interface import MetadataHookInterface

SHIPPED_SUFFIXES = (".py", ".json")


def collector_sources(root):
    src = os.path.join(root, "collector")
    if not os.path.isfile(os.path.join(src, "tracer.py")):
        src = os.path.normpath(os.path.join(root, "..", "..", "collector"))
    if not os.path.isfile(os.path.join(src, "tracer.py")):
        raise FileNotFoundError(f"collector sources not found next to {root} or two levels up")
    return src


class CollectorVersionHook(MetadataHookInterface):
    """The version from collector/_version.py, wherever the sources are (hatch's own version
    source takes one fixed path, and the sdist moves them)."""

    PLUGIN_NAME = "custom"

    def update(self, metadata):
        path = os.path.join(collector_sources(self.root), "_version.py")
        with open(path, encoding="utf-8") as f:
            found = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
        if not found:
            raise ValueError(f"{path}: no line __version__ = \"...\"")
        metadata["version"] = found.group(1)


class CollectorSourcesHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        if version == "editable":
            return  # the checkout's dslogs_collector link (next to this file) is put on the path
        src = collector_sources(self.root)
        for name in sorted(os.listdir(src)):
            if name.endswith(SHIPPED_SUFFIXES):
                build_data["force_include"][os.path.join(src, name)] = f"dslogs_collector/{name}"
