"""Errors the CLI turns into exit 2 with a one-line reason (naming file and line where known)."""


class DslogsError(Exception):
    """A usage or input error: the message is shown to the user as is, on one line."""


class InputError(DslogsError):
    """Logs could not be read at all (missing path, no log files, ...)."""


class UsageError(DslogsError):
    """Bad option value (window, thresholds file, report JSON, ...)."""


class Interrupted(BaseException):
    """Ended by a signal (Ctrl-C's SIGINT, SIGTERM): one line, exit 128 + the signal's number.
    A BaseException, as KeyboardInterrupt is, so no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int, what: str = "the command"):
        import signal

        self.signum = int(signum)
        self.exit_code = 128 + self.signum
        try:
            name = signal.Signals(self.signum).name
        except ValueError:
            name = f"signal {self.signum}"
        super().__init__(f"{what} was stopped by {name}; nothing was written")


def one_line(exc: BaseException, *, every_line: bool = False, limit: int | None = None) -> str:
    """An exception's message on one line, for a message that names what failed: its first
    non-blank line (a Java exception's ``getMessage()``, not its stack), or with ``every_line``
    all its lines joined (DuckDB's SQL errors put the offending text on the lines after the
    first); the exception's type when the message is empty; cut to ``limit`` characters."""
    get_message = getattr(exc, "getMessage", None)
    text = str((get_message() if callable(get_message) else None) or exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    out = (" ".join(lines) if every_line else lines[0]) if lines else type(exc).__name__
    return out if limit is None else out[:limit]
