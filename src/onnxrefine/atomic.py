"""Writing files and folders atomically: a reader sees the old version or the complete new one.

The one place that knows how: a temp file in the target's own folder (a rename only replaces
atomically within one file system), written, flushed and fsync-ed, given the mode an ordinary
open() would have (mkstemp makes it 0600), then renamed over the target. A failure removes the
temp file and leaves the target as it was. A leaf module: it imports nothing of onnxrefine but
the error type, so ir/, verify/, the CLI and the fuzzer can all use it.

A run that produces several files (a model, its external data, a JSON report, an HTML page)
opens a `staging()` block: every write inside it goes to its temp file as usual, but the renames
wait until the run calls `commit()`, so a report that cannot be written (a full disk) never
leaves a new model beside an old report, and never costs the model that was there before.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from onnxrefine.errors import BadInputError

# A temp name is `.<name>.<random>.tmp`: the target's name is cut so that the whole stays well
# inside the 255 bytes most file systems allow, whatever name the target has.
_NAME_BYTES = 80


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def publish_mode(path: str | os.PathLike, *, directory: bool = False) -> None:
    """Give a file or folder made by mkstemp/mkdtemp (mode 0600/0700) the mode an ordinary
    open() or mkdir() would have given it, so outputs are readable by whoever may read the folder."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


def _short(name: str) -> str:
    data = name.encode("utf-8", "surrogateescape")
    if len(data) <= _NAME_BYTES:
        return name
    return data[:_NAME_BYTES].decode("utf-8", "ignore")


def check_name(path: str | os.PathLike) -> None:
    """BadInputError when the file system cannot hold a file of this name (checked before any work,
    so a run does not end in 'File name too long' after it has done everything else)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # no such folder yet, or no pathconf (Windows)
        limit = 255
    if len(path.name.encode("utf-8", "surrogateescape")) > limit:
        raise BadInputError(f"{path.name[:40]}...: file name too long ({len(path.name.encode())} bytes; "
                            f"this file system allows {limit})")


# The supervising process's list of the temp files and folders this process makes beside its
# outputs (__main__.py): a descriptor open for appending, one absolute path a line. A native crash
# runs no clean-up, so the supervisor removes what the list names and the crash left behind.
_journal_fd: int | None = None


def journal_to(fd: int | None) -> None:
    global _journal_fd
    _journal_fd = fd


def journaled(path: str) -> str:
    """`path`, a temp file or folder just made, noted in the supervisor's list (if any)."""
    if _journal_fd is not None:
        try:
            os.write(_journal_fd, os.fsencode(os.path.abspath(path)) + b"\n")
        except OSError:  # the list is a help after a crash, never a reason to fail the run
            pass
    return path


def sweep_journal(listed: bytes) -> list[str]:
    """Remove the temp files and folders `listed` (the journal's bytes) names that still exist (a
    crash left them); returns them. Only names this module makes (`.<name>.<random>...`) are
    touched."""
    listed = [os.fsdecode(line) for line in listed.split(b"\n") if line.strip()]
    removed = []
    for path in dict.fromkeys(listed):
        if not os.path.basename(path).startswith(".") or not os.path.lexists(path):
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
        removed.append(path)
    return removed


def temp_beside(path: str | os.PathLike, folder: str | os.PathLike | None = None) -> tuple[int, str]:
    """An open descriptor and the name of a new temp file named after `path`, in `folder` (by
    default the folder holding the name `path`, symlink or not: the rename then stays within it)."""
    folder = os.path.dirname(os.path.abspath(path)) if folder is None else folder
    fd, name = tempfile.mkstemp(prefix=f".{_short(Path(path).name)}.", suffix=".tmp", dir=folder)
    return fd, journaled(name)


def folder_beside(path: str | os.PathLike, folder: str | os.PathLike) -> str:
    """A new temp folder in `folder` named as temp_beside names a file after `path` (.NAME.*.tmp, so
    a writer killed before its clean-up leaves only what is recognisably that output's)."""
    return journaled(tempfile.mkdtemp(prefix=f".{_short(Path(path).name)}.", suffix=".tmp", dir=folder))


class Staging:
    """Files written but not yet visible: (temp, target) pairs renamed together by `commit`.

    `commit` first keeps a hard link to every target it will replace, so that if one rename fails
    (an immutable target, a folder removed under it) the targets already replaced get their old
    content back: no failure leaves a mix of new and old outputs, and none loses an earlier output.
    """

    def __init__(self) -> None:
        self._moves: list[tuple[str, Path, bool]] = []   # (temp, target, is_folder)
        self._after: list[Callable[[], None]] = []
        self.committed = False

    def add(self, temp: str | os.PathLike, target: str | os.PathLike, *, folder: bool = False) -> None:
        self._moves.append((str(temp), Path(target), folder))

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run `action` once the renames are done (removing files the new outputs made stale)."""
        self._after.append(action)

    def targets(self) -> list[Path]:
        return [target for _, target, _ in self._moves]

    def staged_files(self) -> list[tuple[str, Path]]:
        """(temp, target) of each file (not folder) waiting for the commit."""
        return [(temp, target) for temp, target, is_folder in self._moves if not is_folder]

    def commit(self) -> None:
        moves, self._moves = self._moves, []
        backups: dict[Path, str] = {}
        done: list[Path] = []
        try:
            for _, target, is_folder in moves:
                if target.exists() and not target.is_symlink():
                    backups[target] = _backup(target, is_folder)
            for temp, target, is_folder in moves:
                if is_folder and target.exists() and target not in backups:
                    shutil.rmtree(target)
                os.replace(temp, target)
                done.append(target)
        except BaseException:
            for target in reversed(done):
                with contextlib.suppress(OSError):
                    if target in backups:
                        os.replace(backups.pop(target), target)
                    elif Path(target).is_dir():
                        shutil.rmtree(target)
                    else:
                        os.unlink(target)
            for temp, _, is_folder in moves:
                _remove(temp, is_folder)
            raise
        finally:
            for target, backup in backups.items():
                _remove(backup, target.is_dir())
        self.committed = True
        after, self._after = self._after, []
        for action in after:
            with contextlib.suppress(OSError):
                action()

    def discard(self) -> None:
        moves, self._moves, self._after = self._moves, [], []
        for temp, _, is_folder in moves:
            _remove(temp, is_folder)


def _backup(target: Path, is_folder: bool) -> str:
    """A second name for `target`'s current content, in its folder (a hard link for a file: the
    target stays in place until it is replaced; a folder is renamed aside, it cannot be linked)."""
    folder = str(target.parent)
    if is_folder:
        backup = tempfile.mkdtemp(prefix=f".{_short(target.name)}.", suffix=".old", dir=folder)
        os.rmdir(backup)
        os.replace(target, backup)
        return backup
    fd, backup = tempfile.mkstemp(prefix=f".{_short(target.name)}.", suffix=".old", dir=folder)
    os.close(fd)
    os.unlink(backup)
    try:
        os.link(target, backup)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):  # an immutable or unwritable target: nothing may replace it
            raise PermissionError(exc.errno, f"cannot replace the existing file ({exc.strerror})", str(target)) from None
        # A file system without hard links: a copy keeps the old content just as well.
        shutil.copy2(target, backup)
    return backup


def _remove(path: str, is_folder: bool) -> None:
    with contextlib.suppress(OSError):
        if is_folder:
            shutil.rmtree(path)
        else:
            os.unlink(path)


_active: contextvars.ContextVar[Staging | None] = contextvars.ContextVar("onnxrefine_staging", default=None)


@contextlib.contextmanager
def staging() -> Iterator[Staging]:
    """Hold back every rename made inside the block until `commit()` (called by the run once all
    of its outputs are complete, or by the block's end when it succeeds); a block that fails
    removes every staged file and replaces nothing."""
    stage = Staging()
    token = _active.set(stage)
    try:
        yield stage
        _active.reset(token)
        token = None
        stage.commit()
    except BaseException:
        stage.discard()
        raise
    finally:
        if token is not None:
            _active.reset(token)


def commit_staged() -> None:
    """Make the outputs staged so far visible (nothing happens outside a `staging()` block)."""
    stage = _active.get()
    if stage is not None:
        stage.commit()


def publish(temp: str | os.PathLike, target: str | os.PathLike, *, folder: bool = False) -> None:
    """Rename a complete temp file (or folder) over `target`: now, or at the staging block's
    commit when one is open."""
    stage = _active.get()
    if stage is not None:
        stage.add(temp, target, folder=folder)
    elif folder:
        target = Path(target)
        if target.exists():
            shutil.rmtree(target)
        os.replace(temp, target)
    else:
        os.replace(temp, target)


def after_publish(action: Callable[[], None]) -> None:
    """Run `action` once the outputs are visible: at the staging block's commit, or now."""
    stage = _active.get()
    if stage is not None:
        stage.after_commit(action)
    else:
        with contextlib.suppress(OSError):
            action()


def _named(exc: OSError, path: str | os.PathLike) -> OSError:
    if exc.filename is None:
        exc.filename = str(path)
    return exc


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """A file handle whose content replaces `path` once the block succeeds ('w' text is UTF-8)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_file writes a whole file: mode 'w' or 'wb', not {mode!r}")
    try:
        fd, temp = temp_beside(path)
    except OSError as exc:
        raise _named(exc, path) from None
    try:
        with os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())   # the data is on disk before the rename makes it visible
        publish_mode(temp)
        publish(temp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(exc, OSError):
            raise _named(exc, path) from None
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
    staging_dir = Path(journaled(tempfile.mkdtemp(prefix=f".{_short(target.name)}.", dir=parent)))
    try:
        yield staging_dir
        publish_mode(staging_dir, directory=True)
        publish(staging_dir, target, folder=True)
    except BaseException:
        shutil.rmtree(staging_dir, ignore_errors=True)
        raise
