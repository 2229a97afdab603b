"""Exceptions shared by every layer.

The command line (:func:`llmguide.cli.main`) prints each as one line ``llmguide: ...``: a
:class:`UsageError` (a :class:`ConfigError` among them) exits 2, :class:`Interrupted` 130, any
other :class:`LLMGuideError` 1.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path


class LLMGuideError(Exception):
    """Base class for errors raised by llmguide."""


class UsageError(LLMGuideError):
    """The command cannot run as asked (a bad config, a run directory in use, a folder with no run): exit 2."""


class ConfigError(UsageError):
    """A configuration key or value is invalid. The message names the key."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"config error at '{key}': {message}")


class LLMUnavailableError(LLMGuideError):
    """A language-model backend could not be reached or does not support a call."""


class Interrupted(LLMGuideError):
    """Ctrl-C or SIGTERM stopped a run after it saved what it had (exit 130); the message says how to resume."""


STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EISDIR,
                            errno.ENOTDIR, errno.ENAMETOOLONG})


class StorageError(LLMGuideError, OSError):
    """The file system refused a write: no space, read-only, no permission, a path that is a folder or sits
    under a file, a name too long.  One line naming the path and the fix (still an ``OSError`` with the original
    ``errno``)."""

    def __init__(self, err: OSError, path: str | Path | None = None, key: str | None = None):
        path = Path(path if path is not None else err.filename or "?")
        self.message = (f"{key}: " if key else "") + storage_problem(err.errno, path)
        OSError.__init__(self, err.errno, self.message, str(path))

    def __str__(self) -> str:
        return self.message

    @staticmethod
    def explains(err: BaseException) -> bool:
        """True for an ``OSError`` that a :class:`StorageError` explains better (a full or read-only disk, a
        path that is a folder or sits under a file)."""
        return isinstance(err, OSError) and not isinstance(err, StorageError) and err.errno in STORAGE_ERRNOS


def storage_problem(code: int | None, path: Path) -> str:
    """What the file system's ``errno`` means for ``path``, and the fix, in one line."""
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on the device of {path}: free some space, or write to another disk (e.g. run.dir=DIR)"
    if code == errno.EROFS:
        return f"{path} is on a read-only file system: write to a writable folder (e.g. run.dir=DIR)"
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied on {path}: fix its permissions, or use a folder you own (e.g. run.dir=DIR)"
    if code == errno.ENAMETOOLONG:
        shown = str(path) if len(str(path)) <= 120 else f"{str(path)[:117]}..."
        return f"a name in {shown} is longer than the file system allows: choose a shorter one"
    if code == errno.EISDIR:
        return f"{path} is a folder where a file is expected: give the path of a file (e.g. {path / 'NAME'})"
    parent = file_ancestor(path)
    if parent is None:
        return f"{path} is a file where a folder is expected: choose another path, or move the file away"
    return f"{path} sits under {parent}, which is a file, not a folder: choose another path"


def file_ancestor(path: str | Path) -> Path | None:
    """The nearest existing parent of ``path`` when it is a file, not a folder (None when it is a folder)."""
    for parent in Path(path).parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


@contextlib.contextmanager
def storage_errors(path: str | Path) -> Iterator[None]:
    """Within: an ``OSError`` that :class:`StorageError` explains (no space, read-only ...) becomes one naming
    ``path`` (a failed ``write`` or ``fsync`` names no file of its own)."""
    try:
        yield
    except OSError as err:
        if StorageError.explains(err):
            raise StorageError(err, path) from None
        raise
