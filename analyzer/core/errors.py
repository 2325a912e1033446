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
