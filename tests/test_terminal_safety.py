"""Nothing from logs, file names or the environment reaches the terminal raw.

Each case feeds terminal control codes (an OSC 52 clipboard write, a screen clear, a C1 CSI)
through one command's terminal output, stdout and stderr together, and asserts that no C0
(other than newline), DEL or C1 character comes out: the text is shown escaped (``\\x1b``).
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from tests.ingest_lines import v1_request, write_lines
from tests.otlp_helpers import VllmRequest, write_vllm

HOSTILE = "\x1b]52;c;QUFBQQ==\x07\x1b[2J\x9b31m\x08"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
GOLD = Path(__file__).parent / "gold" / "report_model.json"


def _assert_shown_not_obeyed(r, *, codes=(0, 1, 2)):
    assert r.exit_code in codes, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    raw = [line for line in r.output.splitlines() if RAW.search(line)]
    assert not raw, raw[:3]
    assert "\\x1b" in r.output, r.output  # the value is shown, escaped


def _v1_logs(folder: Path, t0: datetime) -> Path:
    lines = []
    for i in range(4):
        for d in v1_request(f"s{HOSTILE}{i}", f"r{i}", t0 + timedelta(seconds=i)):
            d["host"] = f"h{HOSTILE}"
            lines.append(d)
    write_lines(folder / f"ds15b_{t0:%Y%m%d}.jsonl", lines)
    return folder


def test_watch_once_shows_v1_hosts_escaped(tmp_path):
    logs = _v1_logs(tmp_path, datetime.now().replace(microsecond=0) - timedelta(minutes=2))
    _assert_shown_not_obeyed(CliRunner().invoke(app, ["watch", str(logs), "--once"]), codes=(0,))


def test_watch_once_shows_otlp_hosts_escaped(tmp_path):
    now = time.time() - 120
    reqs = [VllmRequest(request_id=f"cmpl-{HOSTILE}{i}", arrival=now + i, queued=0.01, prefill=0.02, decode=0.5,
                        prompt_tokens=20, completion_tokens=40, max_tokens=1024, finish_reason="stop")
            for i in range(3)]  # fmt: skip
    write_vllm(tmp_path / "traces.otlp.jsonl", reqs,
               resource={"service.name": "vllm", "host.name": f"gpu{HOSTILE}", "process.pid": 1})
    _assert_shown_not_obeyed(CliRunner().invoke(app, ["watch", str(tmp_path), "--once"]), codes=(0,))


def test_diff_md_of_saved_reports_shows_rules_and_sessions_escaped(tmp_path):
    model = json.loads(GOLD.read_text(encoding="utf-8"))
    (tmp_path / "a.json").write_text(json.dumps(model), encoding="utf-8")
    for f in model["findings"]:
        f["rule"] += HOSTILE
        f["session_ids"] = [f"x{HOSTILE}{s}" for s in f.get("session_ids") or ["q"]]
    (tmp_path / "b.json").write_text(json.dumps(model), encoding="utf-8")
    r = CliRunner().invoke(app, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--format", "md"])
    _assert_shown_not_obeyed(r, codes=(0,))


def test_a_log_file_name_in_the_no_events_line(tmp_path):
    folder = tmp_path / f"d{HOSTILE}"
    folder.mkdir()
    (folder / f"x{HOSTILE}.jsonl").write_text("\n", encoding="utf-8")
    for command in (["analyze", str(folder), "--no-cache", "--format", "md"],
                    ["query", str(folder), "SELECT 1", "--no-cache"]):  # fmt: skip
        _assert_shown_not_obeyed(CliRunner().invoke(app, command), codes=(2,))


def test_paths_in_errors(tmp_path):
    logs = _v1_logs(tmp_path / "logs", datetime(2026, 11, 23, 10))
    for command in (
        ["report", "weekly", str(logs), "--week", "2026-W48", "--no-cache", "--format", "md",
         "--previous", str(tmp_path / f"nope{HOSTILE}.json")],
        ["analyze", str(tmp_path / f"missing{HOSTILE}"), "--no-cache"],
        ["analyze", str(logs), "--no-cache", "--thresholds", str(tmp_path / f"t{HOSTILE}.toml")],
        ["render", str(tmp_path / f"r{HOSTILE}.json")],
        ["session", str(logs), f"zz{HOSTILE}"],
    ):
        _assert_shown_not_obeyed(CliRunner().invoke(app, command), codes=(2,))


@pytest.mark.parametrize("args", [[], ["--clear"]])
def test_cache_home_from_the_environment(tmp_path, args):
    r = CliRunner().invoke(app, ["cache", *args], env={"XDG_CACHE_HOME": str(tmp_path / f"c{HOSTILE}")})
    _assert_shown_not_obeyed(r, codes=(0,))
