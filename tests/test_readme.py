"""Every `$ dslogs …` command in README.md's fenced blocks is run, in order, in a scratch folder
holding sample_logs/: it exits as the README implies (0; the number a following `echo $?` shows;
2 where the README shows `dslogs: error:`), and the output the README shows (with `...` for
lines left out) is lines of the real output, in order."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
# Output the README shows that comes from a live service and the clock, not from sample_logs:
# only its first line's command part is compared.
LIVE = ("dslogs watch ",)


def readme_sessions(text: str) -> list[list[tuple[str, list[str]]]]:
    """The README's shell blocks that run dslogs, each as [(command, lines shown after it)]."""
    sessions = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M):
        steps: list[tuple[str, list[str]]] = []
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("$ "):
                cmd = line[2:]
                while cmd.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd = cmd[:-1] + " " + lines[i].strip()
                steps.append((cmd, []))
            elif steps:
                steps[-1][1].append(line)
            i += 1
        if any(cmd.startswith("dslogs ") for cmd, _ in steps):
            sessions.append(steps)
    return sessions


def _strip_comment(cmd: str) -> str:
    # a trailing "# what this does" note in the README is not part of the command
    return re.sub(r"\s+#\s[^'\"]*$", "", cmd)


def _expected_rc(steps, k) -> int:
    cmd, shown = steps[k]
    if cmd.rstrip().endswith("echo $?"):
        return int(shown[0])
    if shown and shown[0].startswith("dslogs: error:"):
        return 2
    if k + 1 < len(steps) and steps[k + 1][0] == "echo $?":
        return int(steps[k + 1][1][0])
    return 0


def _run(cmd: str, cwd: Path, scratch: Path) -> subprocess.CompletedProcess:
    # `dslogs` is this checkout's CLI; /tmp/ paths go to the test's scratch folder
    script = f'dslogs() {{ {shlex.quote(sys.executable)} -m analyzer "$@"; }}\n' + cmd.replace("/tmp/", f"{scratch}/")
    env = {**os.environ, "TZ": "UTC", "COLUMNS": "200", "PYTHONPATH": str(REPO)}
    env.pop("DSLOGS_TZ", None)
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_readme_runs_every_command_and_states_its_seeds():
    sessions = readme_sessions(README.read_text(encoding="utf-8"))
    verbs = {shlex.split(_strip_comment(c))[1] for steps in sessions for c, _ in steps if c.startswith("dslogs ")}
    assert {"analyze", "query", "session", "diff", "report", "simulate", "capacity", "compact", "watch"} <= verbs
    # the seeds the tour's figures come from are stated
    readme = README.read_text(encoding="utf-8")
    assert "seed 2026" in readme and "--change prompt_shift --seed 3" in readme
    assert "$ dslogs analyze sample_logs/concurrent_leak --out dslogs-report.html" in readme


@pytest.mark.slow  # a 14-day simulation and its weekly report among them: about half a minute
def test_every_readme_command_runs_as_shown(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "sample_logs").symlink_to(REPO / "sample_logs")
    (work / "logs").symlink_to(REPO / "sample_logs" / "oom")  # `watch ./logs`: a folder of real-format logs
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    ran = 0
    for steps in readme_sessions(README.read_text(encoding="utf-8")):
        for k, (cmd, shown) in enumerate(steps):
            if cmd == "echo $?":
                continue  # checked with the command before it
            res = _run(_strip_comment(cmd), work, scratch)
            ran += 1
            out = (res.stdout + res.stderr).replace(f"{scratch}/", "/tmp/")
            assert "Traceback" not in out, (cmd, out[-2000:])
            if "|" not in cmd and not cmd.rstrip().endswith("echo $?"):
                assert res.returncode == _expected_rc(steps, k), (cmd, res.returncode, out[-2000:])
            real = [ln.rstrip() for ln in out.splitlines() if ln.strip()]
            want = [ln.rstrip() for ln in shown if ln.strip() and ln.strip() != "..."]
            if cmd.startswith(LIVE):
                want = [w.split("  ·  ")[0] for w in want[:1]]
                real = [r.split("  ·  ")[0] for r in real[:1]]
            pos = 0
            for line in want:
                assert line in real[pos:], f"README shows a line the command does not print:\n$ {cmd}\n{line}\n--- real:\n" \
                                           + "\n".join(real[:80])  # fmt: skip
                pos = real.index(line, pos) + 1
    assert ran >= 15
