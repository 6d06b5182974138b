"""Writing files and folders atomically: a reader sees the old version or the complete new one.

The one place that knows how: a temp file in the target's own folder (a rename only
replaces atomically within one file system), written, flushed and fsync-ed, given the mode an
ordinary open() would have (mkstemp makes it 0600), then renamed over the target. A failure
removes the temp file and leaves the target as it was. A leaf module: it imports nothing of
onnxrefine but the error type, so ir/, verify/, the CLI and the fuzzer can all use it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from onnxrefine.errors import BadInputError


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def publish_mode(path: str | os.PathLike, *, directory: bool = False) -> None:
    """Give a file or folder made by mkstemp/mkdtemp (mode 0600/0700) the mode an ordinary
    open() or mkdir() would have given it, so outputs are readable by whoever may read the folder."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def temp_beside(path: str | os.PathLike, folder: str | os.PathLike | None = None) -> tuple[int, str]:
    """An open descriptor and the name of a new temp file named after `path`, in `folder` (by
    default the folder holding the name `path`, symlink or not: the rename then stays within it)."""
    folder = os.path.dirname(os.path.abspath(path)) if folder is None else folder
    return tempfile.mkstemp(prefix=f".{Path(path).name}.", suffix=".tmp", dir=folder)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """A file handle whose content replaces `path` once the block succeeds ('w' text is UTF-8)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes a whole file: mode 'w' or 'wb', not {mode!r}")
    fd, temp = temp_beside(path)
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())   # the data is on disk before the rename makes it visible
        publish_mode(temp)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Replace `path` with `data` (text is written as UTF-8)."""
    with atomic_file(path, "wb" if isinstance(data, bytes) else "w") as handle:
        handle.write(data)


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike, *, replace: bool = False) -> Iterator[Path]:
    """A temporary folder beside `target` that becomes `target` once the block succeeds (an
    existing `target` is replaced when `replace`, else refused) and is removed if it fails."""
    target = Path(target)
    if target.exists() and not replace:
        raise BadInputError(f"{target}: already exists; choose another folder")
    parent = target.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=parent))
    try:
        yield staging
        publish_mode(staging, directory=True)
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
