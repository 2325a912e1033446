"""What a run knows of one log file (``FileStats``): its identity, what reading it found (rows,
bad lines and their first samples, why it could not be read) and its time range; the catalogue
records it in the store's ``files`` table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

SAMPLES_PER_FILE = 5  # bad-line samples kept per file (validate.add_bad; record_tails)


@dataclass
class FileStats:
    file_id: int
    path: str  # resolved
    display: str
    size: int
    mtime_ns: int
    fingerprint: str | None
    rows: int = 0
    legacy_rows: int = 0
    bad_lines: int = 0
    samples: list[dict] = field(default_factory=list)
    unreadable: str | None = None  # why the file (or its tail) could not be read
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    tz: str | None = None
    line_base: int = 0  # lines before this read (a grown file's tail: the lines read before)
    last_bad: int = 0  # the last bad line's number (is the unterminated last line one?)
    scan: dict | None = None  # lines and read_end, from the fingerprint's pass (cache.fingerprint)
    grow: dict | None = None  # a tail read: the record it extends (plan, record_tails)
