"""README.md's `$ dslogs …` commands: how they are read from its fenced blocks, and that the
tour covers every verb. tests/test_install.py runs each of them in the installed wheel (a bare
venv): it exits as the README implies and prints the lines the README shows."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


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



def test_readme_runs_every_command_and_states_its_seeds():
    sessions = readme_sessions(README.read_text(encoding="utf-8"))
    verbs = {shlex.split(_strip_comment(c))[1] for steps in sessions for c, _ in steps if c.startswith("dslogs ")}
    assert {"analyze", "query", "session", "diff", "report", "simulate", "capacity", "compact", "watch"} <= verbs
    # the seeds the tour's figures come from are stated
    readme = README.read_text(encoding="utf-8")
    assert "seed 2026" in readme and "--change prompt_shift --seed 3" in readme
    assert "$ dslogs analyze sample_logs/concurrent_leak --out dslogs-report.html" in readme
