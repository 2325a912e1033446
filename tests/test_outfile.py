"""One output writer for every --out: atomic (a temporary file beside the target, renamed), and a
path it cannot write is one stderr line naming it, exit 2, nothing half-written left behind."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dslogs.analyzer.cli import app
from dslogs.analyzer.core.errors import UsageError
from dslogs.analyzer.core.outfile import open_out, write_out
from tests.ingest_lines import v1_request, write_lines, write_requests

DSLOGS = [sys.executable, "-m", "dslogs"]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("outlogs")
    write_requests(root, 6, sessions=2)
    return root


@pytest.fixture(scope="module")
def report(logs, tmp_path_factory):
    path = tmp_path_factory.mktemp("outreport") / "report.json"
    r = CliRunner().invoke(app, ["analyze", str(logs), "--format", "json", "--out", str(path), "--no-cache"])
    assert r.exit_code == 0, r.output
    return path


def _commands(logs: Path, report: Path, out: str) -> dict[str, list[str]]:
    return {
        "analyze-html": ["analyze", str(logs), "--no-cache", "--out", out],
        "analyze-json": ["analyze", str(logs), "--no-cache", "--format", "json", "--out", out],
        "analyze-md": ["analyze", str(logs), "--no-cache", "--format", "md", "--out", out],
        "render": ["render", str(report), "--out", out],
        "diff": ["diff", str(report), str(report), "--out", out],
        "diff-html": ["diff", str(report), str(report), "--format", "html", "--out", out],
        "weekly": ["report", "weekly", str(logs), "--week", "2026-W48", "--tz", "UTC", "--no-cache",
                   "--format", "md", "--out", out],
        "query": ["query", str(logs), "SELECT count(*) AS n FROM requests", "--no-cache", "--format", "csv",
                  "--out", out],
        "capacity": ["capacity", str(logs), "--no-cache", "--format", "md", "--out", out],
        "capacity-html": ["capacity", str(logs), "--no-cache", "--out", out],
    }


COMMANDS = ["analyze-html", "analyze-json", "analyze-md", "render", "diff", "diff-html", "weekly", "query", "capacity",
            "capacity-html"]


def _one_line(r, path: str, reason: str):
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1, r.output
    assert lines[0].startswith("dslogs: error: --out ") and path in lines[0] and reason in lines[0], lines[0]
    assert "Traceback" not in r.output


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_writes_its_out_file(logs, report, tmp_path, command):
    out = tmp_path / "result.out"
    r = CliRunner().invoke(app, _commands(logs, report, str(out))[command])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 0
    assert _listing(tmp_path) == ["result.out"]  # no temporary file left beside it


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_folder_is_one_line(logs, report, tmp_path, command):
    out = tmp_path / "no" / "such" / "r.out"
    r = CliRunner().invoke(app, _commands(logs, report, str(out))[command])
    _one_line(r, str(out), "folder does not exist")
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_is_one_line(logs, report, tmp_path, command):
    (tmp_path / "d").mkdir()
    r = CliRunner().invoke(app, _commands(logs, report, str(tmp_path / "d"))[command])
    _one_line(r, str(tmp_path / "d"), "is a directory")
    assert _listing(tmp_path / "d") == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_folder_without_permission_is_one_line(logs, report, tmp_path, command):
    # /sys refuses new files even to root; a chmod'ed folder is tried too where it means something.
    r = CliRunner().invoke(app, _commands(logs, report, "/sys/dslogs-out.txt")[command])
    _one_line(r, "/sys/dslogs-out.txt", "permission denied")
    if IS_ROOT:
        return
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        r = CliRunner().invoke(app, _commands(logs, report, str(locked / "r.out"))[command])
        _one_line(r, str(locked / "r.out"), "permission denied")
        assert _listing(locked) == []
    finally:
        locked.chmod(0o700)


def _limit_file_size():
    # A disk that fills up mid-write: writes past 4 KiB fail with EFBIG instead of killing us.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


@pytest.mark.parametrize("command", ["render", "analyze-html"])
def test_a_full_disk_leaves_the_old_file_and_no_temporary(logs, report, tmp_path, command):
    out = tmp_path / "kept.html"
    out.write_text("the previous report\n", encoding="utf-8")
    args = _commands(logs, report, str(out))[command]
    r = subprocess.run([*DSLOGS, *args], capture_output=True, text=True, preexec_fn=_limit_file_size,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert r.returncode == 2, r.stderr
    err = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and str(out) in err[0] and "cannot write" in err[0], r.stderr
    assert out.read_text(encoding="utf-8") == "the previous report\n"
    assert _listing(tmp_path) == ["kept.html"]


def test_render_refuses_to_overwrite_its_input(tmp_path, report):
    same = tmp_path / "r.html"
    same.write_text(report.read_text(encoding="utf-8"), encoding="utf-8")
    r = CliRunner().invoke(app, ["render", str(same)])
    _one_line(r, str(same), "is the report being read")
    assert json.loads(same.read_text(encoding="utf-8"))["schema"] == "dslogs.report/1"


def test_write_out_is_atomic_and_keeps_the_mode(tmp_path):
    target = tmp_path / "t.txt"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o640)
    with pytest.raises(RuntimeError), open_out(target) as fh:
        fh.write("half")
        raise RuntimeError("interrupted")
    assert target.read_text(encoding="utf-8") == "old" and _listing(tmp_path) == ["t.txt"]
    write_out(target, "new")
    assert target.read_text(encoding="utf-8") == "new"
    assert target.stat().st_mode & 0o777 == 0o640


def test_write_out_follows_a_link(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old", encoding="utf-8")
    (tmp_path / "link.txt").symlink_to(real)
    write_out(tmp_path / "link.txt", "new")
    assert (tmp_path / "link.txt").is_symlink() and real.read_text(encoding="utf-8") == "new"


def test_write_out_names_the_option(tmp_path):
    with pytest.raises(UsageError, match=r"^--page .*: cannot write \(its folder does not exist\)$"):
        write_out(tmp_path / "missing" / "x", "x", option="--page")


@pytest.mark.parametrize(("where", "reason"), [("/sys/dslogs-compact", "cannot write"), ("/proc/dslogs-compact", "cannot write"),
                                               ("FILE", "not a folder")])  # fmt: skip
def test_compact_out_folder_it_cannot_write_is_one_line(logs, tmp_path, where, reason):
    """compact writes a folder of files: a folder it cannot make or write is one line, exit 2."""
    if where == "FILE":
        where = str(tmp_path / "a-file")
        Path(where).write_text("mine\n")
    r = CliRunner().invoke(app, ["compact", str(logs), "--out", where])
    _one_line(r, where, reason)
    if where.endswith("a-file"):
        assert Path(where).read_text() == "mine\n"


def test_compact_makes_a_missing_out_folder_with_its_parents(logs, tmp_path):
    out = tmp_path / "a" / "b"
    r = CliRunner().invoke(app, ["compact", str(logs), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert list(out.rglob("*.parquet")) and not list(out.glob(".probe.*"))


@pytest.mark.parametrize("command", ["analyze", "capacity"])
def test_out_is_checked_before_the_logs_are_read(tmp_path, command):
    """Minutes of reading are not spent on a result that cannot be written: the --out error
    comes first, even over logs that would fail themselves."""
    out = tmp_path / "no" / "r.html"
    r = CliRunner().invoke(app, [command, str(tmp_path / "no-logs-here"), "--no-cache", "--out", str(out)])
    _one_line(r, str(out), "folder does not exist")


def _private_device(folder: Path) -> Path | None:
    """A character device of our own (the null device's numbers) inside ``folder``: replacing it
    harms nothing else. Only root can make one; None elsewhere."""
    if not IS_ROOT:
        return None
    node = folder / "private-null"
    try:
        os.mknod(node, 0o600 | __import__("stat").S_IFCHR, os.makedev(1, 3))
    except OSError:
        return None
    return node


def _refused(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (an --out path that cannot be written in place, the words its refusal names)."""
    import socket
    import stat as st

    found: dict[str, tuple[Path, str]] = {}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    found["fifo-nobody-reads"] = (fifo, "a FIFO nobody reads")
    (tmp_path / "to-fifo").symlink_to(fifo)
    found["link-to-fifo-nobody-reads"] = (tmp_path / "to-fifo", "a FIFO nobody reads")
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    sock.close()
    assert st.S_ISSOCK(os.lstat(sock_path).st_mode)
    found["socket"] = (sock_path, "a socket, not a regular file")
    return found


@pytest.mark.parametrize("command", COMMANDS)
def test_a_special_file_is_never_replaced(logs, report, tmp_path, command):
    """A FIFO nobody reads, a socket or a link to one stays what it is: one line, exit 2. (A
    FIFO's reader is looked for only at the write, so the run's notes may come before it.)"""
    for name, (path, words) in _refused(tmp_path).items():
        before = os.lstat(path).st_mode
        target_before = os.stat(path).st_mode
        r = CliRunner().invoke(app, _commands(logs, report, str(path))[command])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        errors = [x for x in r.output.splitlines() if x.strip() and not x.startswith("dslogs: note:")]
        assert len(errors) == 1 and errors[0].startswith(f"dslogs: error: --out {path}") and words in errors[0], r.output
        assert os.lstat(path).st_mode == before and os.stat(path).st_mode == target_before, name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize("command", COMMANDS)
def test_a_device_is_written_in_place_never_replaced(logs, report, tmp_path, command):
    """``--out /dev/null`` (a CI line that wants only the exit status) works and /dev/null stays
    the null device, as root too; so does a link to it, and, as root, a device node of our own."""
    import stat as st

    targets = [Path("/dev/null")]
    (tmp_path / "to-null").symlink_to("/dev/null")
    targets.append(tmp_path / "to-null")
    device = _private_device(tmp_path)
    if device is not None:
        targets.append(device)
    for path in targets:
        r = CliRunner().invoke(app, _commands(logs, report, str(path))[command])
        assert r.exit_code == 0, r.output
        assert st.S_ISCHR(os.stat(path).st_mode), path
        assert st.S_ISCHR(os.stat("/dev/null").st_mode)
    assert _listing(tmp_path) == sorted(["to-null"] + (["private-null"] if device is not None else []))


def test_a_fifo_with_a_reader_gets_the_output(logs, tmp_path):
    """A FIFO someone reads (a shell's ``--out >(jq .)``) receives the report and stays a FIFO."""
    import stat as st
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    try:
        import time

        time.sleep(0.2)  # the reader opens its end first
        r = CliRunner().invoke(app, ["analyze", str(logs), "--no-cache", "--format", "json", "--out", str(fifo)])
    finally:
        if reader.is_alive():  # still waiting for a writer: release it (non-blocking: it may be ending)
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
    assert r.exit_code == 0, r.output
    assert json.loads(got[0])["schema"] == "dslogs.report/1"
    assert st.S_ISFIFO(os.lstat(fifo).st_mode)


def test_report_save_refuses_a_special_file(tmp_path):
    import dslogs

    (logs := tmp_path / "logs").mkdir()
    lines = []
    for i in range(3):
        lines += v1_request("s0", f"r{i}", datetime(2026, 11, 23, 10, i))
    write_lines(logs / "ds15b_20261123.jsonl", lines)
    rep = dslogs.open(str(logs), use_cache=False).report()
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match=r"^save .*out\.json: a FIFO nobody reads"):
        rep.save(fifo)
    assert __import__("stat").S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("command", ["analyze-md", "capacity", "query", "weekly"])
def test_an_input_log_is_never_the_out_file(logs, report, tmp_path, command):
    """`--out` naming a log the run reads (directly, through a link, or found under LOGS) is
    refused before anything is written; the log keeps its bytes."""
    log = next(logs.glob("*.jsonl"))
    before = log.read_bytes()
    link = tmp_path / "link.jsonl"
    link.symlink_to(log)
    for out in (log, link):
        r = CliRunner().invoke(app, _commands(logs, report, str(out))[command])
        _one_line(r, str(out), "is an input of this run")
        assert log.read_bytes() == before


def test_thresholds_and_previous_are_inputs_too(logs, report, tmp_path):
    th = tmp_path / "t.toml"
    th.write_text("", encoding="utf-8")
    r = CliRunner().invoke(app, ["analyze", str(logs), "--no-cache", "--format", "md", "--thresholds", str(th),
                                 "--out", str(th)])
    _one_line(r, str(th), "is an input of this run")
    assert th.read_text(encoding="utf-8") == ""
    r = CliRunner().invoke(app, ["report", "weekly", str(logs), "--week", "2026-W48", "--tz", "UTC", "--no-cache",
                                 "--format", "md", "--previous", str(report), "--out", str(report)])
    _one_line(r, str(report), "is an input of this run")
    r = CliRunner().invoke(app, _commands(logs, report, str(report))["diff"])
    _one_line(r, str(report), "is an input of this run")
    assert json.loads(report.read_text(encoding="utf-8"))["schema"] == "dslogs.report/1"


FOLDER_WRITERS = {
    "simulate": lambda logs, out: ["simulate", out, "--events", "300", "-q"],
    "compact": lambda logs, out: ["compact", str(logs), "--out", out, "-q"],
}


@pytest.mark.parametrize("command", sorted(FOLDER_WRITERS))
def test_a_folder_writer_refuses_what_cannot_hold_files(logs, tmp_path, command):
    """simulate OUTDIR and compact --out write folders through the same checks: the null device,
    a FIFO, a socket, a file, a path under a file and a place nobody can write are one line and
    exit 2, and each stays what it was."""
    import socket
    import stat as st

    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    sock.close()
    (tmp_path / "file").write_text("mine\n")
    (tmp_path / "to-null").symlink_to("/dev/null")
    cases = {"/dev/null": "a character device, not a folder", str(tmp_path / "to-null"): "a character device",
             str(tmp_path / "fifo"): "a FIFO, not a folder", str(tmp_path / "sock"): "a socket, not a folder",
             str(tmp_path / "file"): "a file, not a folder", str(tmp_path / "file" / "sub"): "cannot write",
             "/proc/dslogs-out": "cannot write"}
    for path, words in cases.items():
        mode = os.lstat(path).st_mode if os.path.lexists(path) else None
        r = CliRunner().invoke(app, FOLDER_WRITERS[command](logs, path))
        assert r.exit_code == 2 and "Traceback" not in r.output, (path, r.output)
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("dslogs: error: ") and path in lines[0] and words in lines[0], lines
        assert (os.lstat(path).st_mode if os.path.lexists(path) else None) == mode, path
    assert st.S_ISCHR(os.stat("/dev/null").st_mode) and (tmp_path / "file").read_text() == "mine\n"


def test_compact_refuses_an_out_folder_inside_its_logs(tmp_path):
    """compact LOGS --out LOGS (or a folder under it) would leave its manifest among the logs, and
    the next run over LOGS reads them as a compacted dataset: one line, exit 2, LOGS untouched."""
    logs = tmp_path / "logs"
    write_requests(logs, 4, sessions=1)
    before = sorted(p.relative_to(logs) for p in logs.rglob("*"))
    for out in (logs, logs / "parquet"):
        r = CliRunner().invoke(app, ["compact", str(logs), "--out", str(out), "-q"])
        _one_line(r, str(out), "inside the logs this run reads")
    assert sorted(p.relative_to(logs) for p in logs.rglob("*")) == before


def test_the_compiled_templates_in_the_cache_folder_are_checked_like_an_out_file(logs, report, tmp_path, monkeypatch):
    """Jinja2's compiled templates, kept in the cache folder, are read and replaced only as regular
    files of dslogs' own: a link planted where one goes (here into the logs), a FIFO there, or a
    link in place of their folder is one line naming it, exit 2, and stays what it was; nothing is
    read or written through it. Removed, the next render compiles and keeps them again."""
    from dslogs.analyzer.render import html as rh

    home = tmp_path / "home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    folder = home / "dslogs" / "templates"

    def render(out: str):
        rh._env.cache_clear()  # a new environment: its templates come from the cache folder
        return CliRunner().invoke(app, ["render", str(report), "--out", str(tmp_path / out)])

    r = render("first.html")
    assert r.exit_code == 0, r.output
    kept = sorted(folder.iterdir())
    assert kept and all(p.is_file() and not p.is_symlink() for p in kept)
    log = next(p for p in sorted(logs.rglob("*")) if p.is_file())
    log_bytes = log.read_bytes()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cases = {"link": (kept[0], lambda: kept[0].symlink_to(log), "a symbolic link", "not a file dslogs wrote"),
             "fifo": (kept[-1], lambda: os.mkfifo(kept[-1]), "a FIFO", "not a file dslogs wrote"),
             "folder link": (folder, lambda: folder.symlink_to(elsewhere), "a symbolic link", "not a folder dslogs made")}
    try:
        for name, (path, make, words, what) in cases.items():
            moved = tmp_path / "moved"
            path.rename(moved)
            make()
            before = os.lstat(path).st_mode
            r = render(f"{name}.html")
            assert r.exit_code == 2 and "Traceback" not in r.output, (name, r.output)
            errors = [x for x in r.output.splitlines() if x.strip() and not x.startswith("dslogs: note:")]
            assert errors == [f"dslogs: error: compiled templates {path}: {words}, {what}; remove it and run again"], \
                (name, r.output)
            assert os.lstat(path).st_mode == before and not (tmp_path / f"{name}.html").exists(), name
            assert log.read_bytes() == log_bytes and not list(elsewhere.iterdir()), name
            path.unlink()
            moved.rename(path)
        # a compiled template removed is compiled and kept again, as a regular file
        kept[0].unlink()
        r = render("again.html")
        assert r.exit_code == 0, r.output
        assert kept[0].is_file() and not kept[0].is_symlink()
    finally:
        rh._env.cache_clear()


def test_the_chart_bundle_in_the_cache_folder_is_checked_like_an_out_file(logs, report, tmp_path, monkeypatch):
    """The chart bundle dslogs keeps in its cache folder (when none is shipped) is read and
    written only as a regular file of its own: a link there (here into the logs), a FIFO or a
    device is one line naming it, exit 2, and stays what it was; nothing is written through it."""
    from dslogs.analyzer.render import html as rh
    from dslogs.analyzer.render import page_cache

    home = tmp_path / "home"
    (home / "dslogs").mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    name = "vega-bundle-0.0.outfile-test.js"
    monkeypatch.setattr(page_cache, "bundle_file_name", lambda: name)
    monkeypatch.setattr(rh, "bundle_file_name", lambda: name)
    monkeypatch.setattr(rh, "build_vega_bundle", lambda: "/*built*/window.vegaEmbed=1;")
    bundle = home / "dslogs" / name
    log = next(p for p in sorted(logs.rglob("*")) if p.is_file())
    log_bytes = log.read_bytes()
    cases = {"link": (lambda: bundle.symlink_to(log), "a symbolic link"),
             "fifo": (lambda: os.mkfifo(bundle), "a FIFO")}
    if _private_device(tmp_path) is not None:
        cases["device"] = (lambda: os.mknod(bundle, 0o600 | __import__("stat").S_IFCHR, os.makedev(1, 3)),
                           "a character device")
    for name_, (make, words) in cases.items():
        make()
        before = os.lstat(bundle).st_mode
        for args in (["render", str(report), "--out", str(tmp_path / "r.html")],
                     ["analyze", str(logs), "--no-cache", "--out", str(tmp_path / "a.html")]):
            rh.vega_bundle.cache_clear()
            r = CliRunner().invoke(app, args)
            assert r.exit_code == 2 and "Traceback" not in r.output, (name_, r.output)
            errors = [x for x in r.output.splitlines() if x.strip() and not x.startswith("dslogs: note:")]
            assert errors == [f"dslogs: error: chart bundle {bundle}: {words}, not a file dslogs wrote; "
                              "remove it and run again"], (name_, r.output)
            assert os.lstat(bundle).st_mode == before, name_
        assert log.read_bytes() == log_bytes and not (tmp_path / "r.html").exists()
        bundle.unlink()
    # a missing bundle is built and kept as a regular file of dslogs' own; a second run reads it
    rh.vega_bundle.cache_clear()
    r = CliRunner().invoke(app, ["render", str(report), "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    assert bundle.is_file() and not bundle.is_symlink() and bundle.read_text() == "/*built*/window.vegaEmbed=1;"
    assert "/*built*/" in (tmp_path / "r.html").read_text()
    rh.vega_bundle.cache_clear()
