"""Prometheus text snapshots of a serving engine's ``/metrics`` (``*.prom``): no events, read
aside into the report's server metrics by ``dslogs.analyzer.ingest.prometheus``."""

from __future__ import annotations

import re

from dslogs.analyzer.ingest.formats import SNAPSHOT, Format

_PROM = re.compile(rb"^(# (HELP|TYPE) [a-zA-Z_:][\w:]* |[a-zA-Z_:][\w:]*(\{[^}]*\})? [-+0-9.eEnNaIif]+)", re.M)


def _sniff(head: bytes, first) -> bool:
    from dslogs.analyzer.ingest.prometheus import looks_like

    return first() is None and looks_like(head)


def _describe(text: bytes) -> str | None:
    # metrics text of no known server, or a snapshot not named *.prom
    if _PROM.match(text) and b"\x00" not in text[:4096]:
        return "Prometheus text metrics (dslogs reads them from *.prom files)"
    return None


def _snapshots(files, lo, hi, group="auto"):
    from dslogs.analyzer.ingest.prometheus import read_servers

    return read_servers(files, lo, hi, group)


FORMAT = Format(
    name="prometheus",
    order=90,
    writer="`curl host:8000/metrics` snapshots of vLLM, SGLang, TGI or llama.cpp (*.prom)",
    sniff=_sniff,
    read=SNAPSHOT,
    names=r"^(?!\.).*\.prom(?:\.gz)?$",
    names_text="*.prom (Prometheus snapshots)",
    describe=_describe,
    snapshots=_snapshots,
)
