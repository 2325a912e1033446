"""Fast timestamp strings from epoch milliseconds (one datetime call per minute, cached)."""

from __future__ import annotations

from datetime import UTC, datetime


class TsFormatter:
    """``ts(ms)`` → ``2026-11-23T10:15:30.123+08:00`` in a fixed UTC offset (naive if asked)."""

    def __init__(self, offset_min: int, naive: bool = False):
        self.off = offset_min * 60_000
        sign = "+" if offset_min >= 0 else "-"
        a = abs(offset_min)
        suffix = "" if naive else f"{sign}{a // 60:02d}:{a % 60:02d}"
        self._ms = [f"{i:03d}{suffix}" for i in range(1000)]
        self._ss = [f"{i:02d}." for i in range(60)]
        self._secs: dict[int, str] = {}
        self._minutes: dict[int, str] = {}

    def __call__(self, ms: int) -> str:
        sec, rem = divmod(ms + self.off, 1000)
        prefix = self._secs.get(sec)
        if prefix is None:
            prefix = self._prefix(sec)
        return prefix + self._ms[rem]

    def many(self, *times: int) -> list[str]:
        """Several timestamps in one call (a request's seven)."""
        off, secs, msl = self.off, self._secs, self._ms
        out = []
        for ms in times:
            sec, rem = divmod(ms + off, 1000)
            prefix = secs.get(sec)
            if prefix is None:
                prefix = self._prefix(sec)
            out.append(prefix + msl[rem])
        return out

    def _prefix(self, sec: int) -> str:
        if len(self._secs) > 200_000:
            self._secs.clear()
            self._minutes.clear()
        minute, s = divmod(sec, 60)
        head = self._minutes.get(minute)
        if head is None:
            head = datetime.fromtimestamp(minute * 60, tz=UTC).strftime("%Y-%m-%dT%H:%M:")
            self._minutes[minute] = head
        prefix = head + self._ss[s]
        self._secs[sec] = prefix
        return prefix

    def local_date(self, ms: int) -> str:
        """YYYYMMDD of the writer's local day (file names)."""
        return datetime.fromtimestamp((ms + self.off) / 1000, tz=UTC).strftime("%Y%m%d")
