"""The wheel's one import root: dslogs/, with the analyzer (analyzer/ at the repository's top) as
dslogs.analyzer and its SQL and templates in dslogs/analyzer/_data.

An editable install gets none of these copies: it puts the checkout on the path, where
dslogs/analyzer is a link to analyzer/ and the SQL and templates are found at the top
(dslogs.analyzer.core.resources), so an edit is seen without reinstalling."""

from __future__ import annotations

import os

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

COPIES = {"analyzer": "dslogs/analyzer", "queries": "dslogs/analyzer/_data/queries",
          "templates": "dslogs/analyzer/_data/templates"}


class AnalyzerHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        if self.target_name != "wheel" or version == "editable":
            return
        for src, dest in COPIES.items():
            build_data["force_include"][os.path.join(self.root, src)] = dest
