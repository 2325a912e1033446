"""dslogs.analyzer.core.format: each medium's preset keeps the output its readers know, from one
implementation; dslogs.analyzer.core.time.parse_iso and zone are the only timestamp and zone parsing."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from dslogs.analyzer.core import format as fmt
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.time import parse_iso, zone


@pytest.mark.parametrize(("value", "digits", "text"), [
    (None, 1, "—"), ("", 1, "—"), (math.nan, 1, "—"), (True, 1, "yes"), (1234, 1, "1,234"),
    (12.0, 1, "12"), (0.0, 1, "0"), (1234.56, 1, "1,235"), (3.14159, 1, "3.14"), (42.25, 1, "42.2"),
    (12.0, 2, "12.00"), (0.123, 3, "0.123"),
    # a zero reads "0" at any digits (and never "-0.00"); a value that rounds to zero keeps its decimals
    (0.0, 2, "0"), (-0.0, 1, "0"), (0, 2, "0"), (0.004, 1, "0.00"), (-0.004, 2, "-0.00"), (0.5, 1, "0.50"),
])
def test_table_cells(value, digits, text):
    assert fmt.table(value, digits) == text


@pytest.mark.parametrize(("value", "digits", "text"), [
    (None, 1, "n/a"), (3, 1, "3"), (3.0, 2, "3"), (0.0, 1, "0"), (1234.5, 1, "1,234.5"), (0.456, 2, "0.46"),
])
def test_prose_in_findings(value, digits, text):
    assert fmt.prose(value, digits) == text


@pytest.mark.parametrize(("value", "compact", "axis"), [
    (0, "0", "0"), (2.5, "2.5", "2.5"), (0.05, "0.05", "0.05"), (12.0, "12.0", "12"), (12.5, "12.5", "12.5"),
    (2500, "2,500", "2,500"), (-0.00123, "-0.00123", "-0.00123"), (99.96, "100.0", "100"),
])
def test_three_significant_digits(value, compact, axis):
    assert fmt.compact(value) == compact
    assert fmt.axis(value) == axis


def test_units_shares_and_sizes():
    assert fmt.with_unit(1500.0, "ms") == "1,500 ms"
    assert fmt.with_unit(None, "ms") == "—"
    assert fmt.share(0.1234) == "12.3 %" and fmt.share(None) == "—"
    assert fmt.signed_pct(5) == "+5.0 %" and fmt.signed_pct(None) == "—"
    assert fmt.mib(512.0) == "512 MiB" and fmt.mib(1536) == "1.5 GiB"
    assert fmt.bytes_si(999) == "999 B" and fmt.bytes_si(1_500_000) == "1.5 MB"
    assert fmt.terminal(50) == "50.0" and fmt.terminal(1234.5) == "1,234" and fmt.terminal(None) == "—"


def test_parse_iso_reads_logged_stamps():
    assert parse_iso("2026-11-23T10:00:00Z").utcoffset() == timedelta(0)
    assert parse_iso("2026-11-23 10:00:00.5+08:00").utcoffset() == timedelta(hours=8)
    assert parse_iso("2026-11-23T10:00:00").tzinfo is None
    with pytest.raises(ValueError):
        parse_iso("yesterday-ish")


def test_zone_is_local_when_unset_and_names_the_option_when_unknown():
    assert zone("UTC").utcoffset(None) == timedelta(0)
    assert zone(None).utcoffset(parse_iso("2026-11-23T10:00:00")) == zone("").utcoffset(parse_iso("2026-11-23T10:00:00"))
    with pytest.raises(UsageError, match="--tz"):
        zone("Mars/Olympus")
