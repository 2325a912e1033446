"""Log file names: the writer's day a name carries and the write order of rotated files, shared
by discovery, the compacted dataset's manifest and watch.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

_NAME_DATE = re.compile(r"(?:^|[_.-])(\d{4})-?(\d{2})-?(\d{2})(?=[_.-])")
_ROTATION = re.compile(r"\.(\d+)\.jsonl(?:\.gz)?$|\.jsonl\.(\d+)(?:\.gz)?$")


def name_date(name: str) -> date | None:
    """The YYYYMMDD (or YYYY-MM-DD) day in a log file name, if any."""
    for m in _NAME_DATE.finditer(Path(name).name):
        try:
            return date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            continue
    return None


def rotation_index(name: str) -> int:
    m = _ROTATION.search(name)
    if not m:
        return 0
    return int(m.group(1) or m.group(2))


def name_sort_key(path: str) -> tuple:
    """Write order of log files: folder, then day, then rotation (``x.jsonl`` before ``x.1.jsonl``);
    a gzipped file sorts as its plain self. logrotate's ``x.jsonl.1`` is older than ``x.jsonl``."""
    p = Path(str(path))
    name = p.name[:-3] if p.name.endswith(".gz") else p.name
    day = name_date(name)
    logrotate = re.search(r"\.jsonl\.(\d+)$", name)
    stem = re.sub(r"(\.\d+)?\.jsonl(\.\d+)?$", "", name)
    if logrotate:
        # app.jsonl.2 (oldest) < app.jsonl.1 < app.jsonl
        order = -int(logrotate.group(1))
    else:
        order = rotation_index(name)
    return (str(p.parent), day or date.min, re.sub(r"\d{8}", "", stem), order, name)
