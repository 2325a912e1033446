"""Fast timestamp strings from epoch milliseconds (one datetime call per minute, cached)."""

from __future__ import annotations

from datetime import UTC, datetime


class TsFormatter:
    """``ts(ms)`` → ``2026-11-23T10:15:30.123+08:00`` in a fixed UTC offset (naive if asked)."""

    def __init__(self, offset_min: int, naive: bool = False):
        self.off = offset_min * 60_000
        sign = "+" if offset_min >= 0 else "-"
        a = abs(offset_min)
        self.suffix = "" if naive else f"{sign}{a // 60:02d}:{a % 60:02d}"
        self._minutes: dict[int, str] = {}

    def __call__(self, ms: int) -> str:
        minute, rem = divmod(ms + self.off, 60_000)
        prefix = self._minutes.get(minute)
        if prefix is None:
            prefix = datetime.fromtimestamp(minute * 60, tz=UTC).strftime("%Y-%m-%dT%H:%M:")
            self._minutes[minute] = prefix
        return f"{prefix}{rem // 1000:02d}.{rem % 1000:03d}{self.suffix}"

    def local_date(self, ms: int) -> str:
        """YYYYMMDD of the writer's local day (file names)."""
        return datetime.fromtimestamp((ms + self.off) / 1000, tz=UTC).strftime("%Y%m%d")
