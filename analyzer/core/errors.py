"""Errors the CLI turns into exit 2 with a one-line reason (naming file and line where known)."""


class DslogsError(Exception):
    """A usage or input error: the message is shown to the user as is, on one line."""


class InputError(DslogsError):
    """Logs could not be read at all (missing path, no log files, ...)."""


class UsageError(DslogsError):
    """Bad option value (window, thresholds file, report JSON, ...)."""
