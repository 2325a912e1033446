"""``--since`` / ``--until`` values: ``30m``, ``12h``, ``1d``, ``7d``, ``2w`` before
now, or an ISO date / datetime.

A bare date means midnight at the start of that day in ``tz`` (as journalctl reads it), so
``--since 2026-11-23 --until 2026-11-24`` is the whole of 23 November. A datetime without an
offset is wall-clock time in ``tz``; ``tz`` ``None`` means the machine's local zone. The window
is half-open: since <= ts < until.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dslogs.analyzer.core.errors import UsageError

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
FORMS = "30m, 12h, 1d, 7d, 2w, an ISO date (2026-11-23) or datetime (2026-11-23T10:00[+08:00])"


def parse_duration(text: str, option: str) -> float:
    """A length of time (``2s``, ``500ms``, ``15m``, ``1h``, ``7d``, ``2w``; a bare number is
    seconds) -> seconds; UsageError naming the option when it is not one."""
    m = _DURATION.match(str(text))
    if not m or not 0 < float(m.group(1)) < 1e9:
        raise UsageError(f"{option} {text!r}: expected a duration like 2s, 500ms, 15m, 1h or 7d")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2) or "s"]


def parse_iso(text: str) -> datetime:
    """A logged or stored ISO-8601 timestamp (``Z`` for UTC, offset optional): aware when it
    carries an offset, naive when not; ValueError when it is not one."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def wall_clock(text: str, option: str, expected: str) -> datetime:
    """A local wall-clock time given as an option (``--start``): ISO without an offset, naive;
    UsageError naming the option and ``expected`` (the form it takes) otherwise."""
    try:
        value = parse_iso(text)
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected {expected}") from None
    if value.tzinfo is not None:
        raise UsageError(f"{option} {text!r}: give local wall-clock time without an offset")
    return value


def zone(tz: str | None) -> tzinfo:
    """The tzinfo for ``--tz`` (an IANA name such as Asia/Shanghai, or UTC); local when None or
    empty. It is the zone of the name DuckDB is told (``zone_name``), so both agree."""
    return ZoneInfo(zone_name(tz))


# Zone folders of the same rules under another name: posix/ is a copy of the plain zones;
# right/ counts leap seconds, which DuckDB's zones do not (its times differ by them, ~27 s).
_ZONE_PREFIXES = ("posix/", "right/")


# the in-memory DuckDB the zone list was read from, until a run takes it (``memory_connection``)
_spare: list = []


@cache
def _duckdb_zones() -> frozenset[str]:
    """The zone names DuckDB (ICU) accepts for its TimeZone setting."""
    import duckdb

    con = duckdb.connect()
    try:
        zones = frozenset(row[0] for row in con.execute("SELECT name FROM pg_timezone_names()").fetchall())
    except BaseException:
        con.close()
        raise
    _spare.append(con)
    return zones


def memory_connection():
    """A new in-memory DuckDB connection, as ``duckdb.connect()`` gives: the one the zone list was
    read from while no run took it yet (each command validates its zone first; starting a second
    DuckDB for the logs cost ~10-15 ms CPU a run)."""
    import duckdb

    try:
        return _spare.pop()
    except IndexError:
        return duckdb.connect()


def _known_zone(name: str) -> str | None:
    """The name DuckDB knows for the IANA zone ``name``: itself, without a posix/ or right/
    folder, or the zone a link such as ``localtime`` or ``posixrules`` points at; None if none."""
    zones = _duckdb_zones()
    if not name.isprintable() or len(name) > 255:
        return None  # a NUL, a control character, a path-long name: no zone is called that
    candidates = [name] + [name[len(p):] for p in _ZONE_PREFIXES if name.startswith(p)]
    import zoneinfo

    for root in zoneinfo.TZPATH:
        for candidate in list(candidates):
            try:
                real = os.path.realpath(os.path.join(root, candidate))
            except (OSError, ValueError):
                continue
            if "/zoneinfo/" in real and os.path.isfile(real):
                target = real.split("/zoneinfo/", 1)[1]
                candidates += [target] + [target[len(p):] for p in _ZONE_PREFIXES if target.startswith(p)]
    for candidate in candidates:
        if candidate in zones and _zoneinfo_ok(candidate):
            return candidate
    return None


def _zoneinfo_ok(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


# A POSIX TZ value (what containers often set): std name, offset west of UTC, optional
# daylight name, offset and rule, e.g. UTC0, CST-8, EST5EDT,M3.2.0,M11.1.0, <+0330>-3:30.
_POSIX_TZ = re.compile(
    r"^(?P<std>[A-Za-z]{3,}|<[+\-0-9A-Za-z]+>)(?P<sign>[+-]?)(?P<h>\d{1,2})(?::(?P<m>\d{2})(?::\d{2})?)?"
    r"(?P<dst>[A-Za-z]{3,}|<[+\-0-9A-Za-z]+>)?(?P<rest>.*)$"
)
# The US rule (the one the IANA zones EST5EDT, CST6CDT, MST7MDT, PST8PDT follow today).
_US_RULES = ("", ",M3.2.0,M11.1.0", ",M3.2.0/2,M11.1.0/2", ",M3.2.0/2:00:00,M11.1.0/2:00:00")


def _posix_zone(value: str) -> str | None:
    """The IANA zone that keeps the time a POSIX TZ string describes, or None when none does."""
    m = _POSIX_TZ.match(value)
    if not m:
        return None
    hours = int(m.group("h")) * (-1 if m.group("sign") == "-" else 1)  # west of UTC positive
    if m.group("dst") is None:
        if m.group("rest") or (m.group("m") and int(m.group("m"))) or abs(hours) > 14:
            return None
        # Etc/GMT+5 is UTC-5: the POSIX sign, which is why these names look inverted
        return "UTC" if hours == 0 else f"Etc/GMT{hours:+d}"
    name = f"{m.group('std')}{hours}{m.group('dst')}"
    if m.group("m") or m.group("rest") not in _US_RULES or name not in _duckdb_zones():
        return None
    return name


def local_zone_name() -> str:
    """The machine's IANA zone name (what DuckDB's TimeZone setting is given): ``$TZ`` as an
    IANA name, a zone file (``:/etc/localtime``) or a POSIX rule with an IANA equivalent, else
    the zone /etc/localtime links to; UTC if unknown. UsageError for a ``$TZ`` with no such name."""
    env = os.environ.get("TZ")
    if env:
        value = env[1:] if env.startswith(":") else env
        if value.startswith("/"):
            real = os.path.realpath(value)
            named = _known_zone(real.split("/zoneinfo/", 1)[1]) if "/zoneinfo/" in real else None
        else:
            named = _known_zone(value) if value and ".." not in value else None
            named = named or _posix_zone(value)
        if named is None:
            raise UsageError(f"TZ={env!r}: not a time zone dslogs can use; set TZ to an IANA name "
                             f"(Asia/Shanghai, UTC) or a whole-hour POSIX offset (CST-8), or pass --tz")
        return named
    try:
        target = os.path.realpath("/etc/localtime")
        marker = "/zoneinfo/"
        if marker in target:
            return _known_zone(target.split(marker, 1)[1]) or "UTC"
    except OSError:
        pass
    return "UTC"


def local_zone_info() -> tzinfo:
    return ZoneInfo(local_zone_name())


def zone_name(tz: str | None) -> str:
    """The IANA name DuckDB is told for ``tz`` (validated): local for None or empty; UsageError
    for a name neither zoneinfo nor DuckDB can use."""
    if tz is None or not tz.strip():
        return local_zone_name()
    named = _known_zone(tz) if ".." not in tz and not tz.startswith("/") else None
    if named is None:
        raise UsageError(f"--tz {tz!r}: unknown time zone (use an IANA name like Asia/Shanghai or UTC)")
    return named


def parse_when(text: str, now: datetime | None = None, tz: str | None = None) -> datetime:
    """An aware datetime for a ``--since``/``--until`` value; UsageError naming the forms if bad."""
    if now is None:
        now = datetime.now(UTC)
    elif now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    raw = (text or "").strip()
    m = _RELATIVE.match(raw)
    if m:
        amount, unit = float(m.group(1)), m.group(2).lower()
        try:
            return _in_range(now - timedelta(seconds=amount * _UNIT_SECONDS[unit]), text)
        except (OverflowError, ValueError):
            raise UsageError(f"{text!r}: out of range (before year 1)") from None
    word = raw.lower()
    where = zone(tz)
    if word == "now":
        return now
    if word in ("today", "yesterday"):
        day = now.astimezone(where).date() - timedelta(days=1 if word == "yesterday" else 0)
        return datetime.combine(day, time(0), where)
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):
            return _in_range(datetime.combine(date.fromisoformat(raw), time(0), where), text)
        value = parse_iso(raw)
    except ValueError:
        raise UsageError(f"{text!r}: not a time; expected {FORMS}") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=where)
    return _in_range(value, text)


def _in_range(value: datetime, text: str) -> datetime:
    """``value`` if it lies in what datetime and DuckDB can hold in UTC, else UsageError."""
    try:
        utc = value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise UsageError(f"{text!r}: out of range (years 1 to 9999)") from None
    if not 1 <= utc.year <= 9999:
        raise UsageError(f"{text!r}: out of range (years 1 to 9999)")
    return value


def parse_window(
    since: str | datetime | None, until: str | datetime | None, tz: str | None = None,
    now: datetime | None = None,
) -> tuple[datetime | None, datetime | None]:
    """(since, until) as aware datetimes, the option named in any error; an instant already
    parsed (``Selection``) is taken as it is."""
    now = now or datetime.now(UTC)
    try:
        lo = since if isinstance(since, datetime) else parse_when(since, now, tz) if since else None
    except UsageError as exc:
        raise UsageError(f"--since {exc}") from None
    try:
        hi = until if isinstance(until, datetime) else parse_when(until, now, tz) if until else None
    except UsageError as exc:
        raise UsageError(f"--until {exc}") from None
    if lo is not None and hi is not None and lo >= hi:
        raise UsageError(f"--since {since} is not before --until {until}: the window is empty")
    return lo, hi


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def human_duration(seconds: float) -> str:
    """A span in the largest units that read well: ``59 s``, ``4 min 10 s``, ``3 h 20 min``,
    ``6 d 4 h``."""
    s = int(round(abs(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    if s < 86400:
        return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")
    return f"{s // 86400} d" + (f" {s % 86400 // 3600} h" if s % 86400 // 3600 else "")


def span_between(first: str | None, last: str | None) -> str | None:
    """``human_duration`` from one ISO timestamp to another; None where either is missing or
    unreadable."""
    if not first or not last:
        return None
    try:
        return human_duration((parse_iso(last) - parse_iso(first)).total_seconds())
    except (TypeError, ValueError):
        return None
