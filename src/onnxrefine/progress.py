"""Progress of long phases: reported by library code, shown by the CLI.

Library code marks what it is doing and never knows whether anyone watches:

    with progress.phase("verify", total=len(sets)):
        for index, feeds in enumerate(sets):
            progress.report(done=index, detail=f"input set {label}: candidate run")

`phase` pushes a frame on the current reporter's stack (frames nest: optimize > verify > ...);
`report` updates the innermost frame. Both cost one context-variable lookup when nobody listens
(the default), so they can sit in loops. The reporter is ambient (a ContextVar) rather than a
parameter: the layers between the CLI and the verifier need not pass it along, and a Python API
user can subscribe with `with progress.reporting(my_reporter): optimize(...)`.

Two displays, both on stderr so that stdout stays the command's result:
- `LiveDisplay` (a terminal): a rich Live region with one line per frame (spinner, counts, bar,
  elapsed); it disappears when the work ends, leaving one line per top-level phase that took
  over a second.
- `PlainDisplay` (a pipe or file): one line when a phase has been running for `delay` seconds
  (default 1, so quick commands and quick errors print nothing extra), then at most one line per
  phase change, a heartbeat every 5 s while counts or details change (30 s while they do not),
  and a "done in" line when the last phase ends without an error.
`display_for_stderr()` picks one; ONNXREFINE_PROGRESS=live|plain|off and
ONNXREFINE_PROGRESS_DELAY=SECONDS override the choice.

rich is imported only when a live display starts (start-up time of the CLI matters).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TextIO

__all__ = ["Reporter", "phase", "in_phase", "report", "reporting", "LiveDisplay", "PlainDisplay",
           "display_for_stderr", "showing", "failed_phase"]


class Reporter(Protocol):
    """What `phase` and `report` talk to; any object with these three methods will do."""

    def push(self, name: str, total: int | None, detail: str) -> None: ...

    def update(self, done: int | None, total: int | None, detail: str | None, note: str | None) -> None: ...

    def pop(self, ok: bool = True) -> None: ...  # ok: False when the phase ended by an exception


_CURRENT: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar("onnxrefine_progress",
                                                                           default=None)


@contextlib.contextmanager
def phase(name: str, *, total: int | None = None, detail: str = "") -> Iterator[None]:
    """Mark a phase (nested inside the current one) for as long as the block runs."""
    reporter = _CURRENT.get()
    if reporter is not None:
        reporter.push(name, total, detail)
    try:
        yield
    except BaseException as exc:
        if failed_phase(exc) is None:  # the innermost phase: where the error happened
            with contextlib.suppress(AttributeError, TypeError):
                exc.onnxrefine_phase = name
        if reporter is not None:
            reporter.pop(False)
        raise
    if reporter is not None:
        reporter.pop(True)


def failed_phase(exc: BaseException) -> str | None:
    """The innermost phase an exception ended (for an error line that says where: "not enough
    memory during optimize model.onnx")."""
    return getattr(exc, "onnxrefine_phase", None)


def in_phase(name: str) -> Callable:
    """Decorator: the whole call is one phase (a hook that needs no re-indented body)."""

    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if _CURRENT.get() is None:
                return function(*args, **kwargs)
            with phase(name):
                return function(*args, **kwargs)
        return wrapper
    return decorate


def report(done: int | None = None, total: int | None = None, detail: str | None = None,
           note: str | None = None) -> None:
    """Update the innermost phase: `done` of `total` steps, what is happening now (`detail`),
    and a secondary figure (`note`, e.g. nodes visited; cleared when `detail` changes)."""
    reporter = _CURRENT.get()
    if reporter is not None:
        reporter.update(done, total, detail, note)


@contextlib.contextmanager
def reporting(reporter: Reporter | None) -> Iterator[Reporter | None]:
    """Send the progress of the code in the block to `reporter` (None: to nobody)."""
    token = _CURRENT.set(reporter)
    try:
        yield reporter
    finally:
        _CURRENT.reset(token)


# --- displays -----------------------------------------------------------------------------------


@dataclass
class Frame:
    name: str
    total: int | None = None
    done: int | None = None
    detail: str = ""
    note: str = ""
    started: float = field(default_factory=time.monotonic)
    shown: bool = False

    def text(self) -> str:
        parts = [self.name]
        if self.total is not None:
            parts.append(f"{self.done or 0}/{self.total}")
        elif self.done is not None:
            parts.append(str(self.done))
        if self.detail:
            parts.append(self.detail)
        if self.note:
            parts.append(f"({self.note})")
        return " ".join(parts)


class _Stack:
    """The frames of the phases now running, guarded by a lock (displays draw from a thread)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._frames: list[Frame] = []
        self._started = time.monotonic()
        # Worker processes forked while a display is current (fuzz --jobs) inherit it, and maybe
        # its lock in a held state: only the process that made the display reports to it.
        self._pid = os.getpid()

    def _foreign(self) -> bool:
        return os.getpid() != self._pid

    def push(self, name: str, total: int | None = None, detail: str = "") -> None:
        if self._foreign():
            return
        with self._lock:
            self._frames.append(Frame(name, total, None, detail))
            self._changed()

    def update(self, done=None, total=None, detail=None, note=None) -> None:
        if self._foreign():
            return
        with self._lock:
            if not self._frames:
                return
            frame = self._frames[-1]
            if total is not None:
                frame.total = total
            if done is not None:
                frame.done = done
            if detail is not None and detail != frame.detail:
                frame.detail, frame.note = detail, ""
            if note is not None:
                frame.note = note
            self._changed()

    def pop(self, ok: bool = True) -> None:
        if self._foreign():
            return
        with self._lock:
            if self._frames:
                self._ended(self._frames.pop(), ok)

    def frames(self) -> list[Frame]:
        with self._lock:
            return list(self._frames)

    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def _changed(self) -> None:
        pass

    def _ended(self, frame: Frame, ok: bool) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        while self.frames():
            self.pop(False)


def _seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s"


class PlainDisplay(_Stack):
    """Log lines for a pipe or a file: a phase is shown once it has run `delay` seconds, then at
    most one line per phase change, plus a heartbeat every `heartbeat` seconds when the line has
    changed (counts, detail), every 6 x `heartbeat` seconds when it has not."""

    def __init__(self, stream: TextIO | None = None, *, delay: float = 1.0, heartbeat: float = 5.0,
                 tick: float = 0.25) -> None:
        super().__init__()
        self.stream = stream if stream is not None else sys.stderr
        self.delay, self.heartbeat, self.tick = delay, heartbeat, tick
        self._last_line = 0.0
        self._last_text = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self):
        # A ticker notices a phase that outlives `delay` while the code reports nothing.
        self._thread = threading.Thread(target=self._run, name="onnxrefine-progress", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
        super().close()

    def _run(self) -> None:
        while not self._stop.wait(self.tick):
            with self._lock:
                self._maybe_print()

    def _changed(self) -> None:
        self._maybe_print()

    def _maybe_print(self) -> None:
        if not self._frames:
            return
        now = time.monotonic()
        text = " > ".join(frame.text() for frame in self._frames)
        due = any(not frame.shown and now - frame.started >= self.delay for frame in self._frames)
        # Heartbeat: what changed every `heartbeat` seconds; an unchanged line only 6x as rarely.
        quiet = now - self._last_line if self._last_line else 0.0
        beat = quiet >= self.heartbeat and (text != self._last_text or quiet >= 6 * self.heartbeat)
        if due or beat:
            self._print(text)
            self._last_text = text
            for frame in self._frames:
                frame.shown = True

    def _ended(self, frame: Frame, ok: bool) -> None:
        # A failed phase gets no "done" line: the error line that follows says what happened.
        if ok and frame.shown and not self._frames:
            self._print(f"{frame.name}: done in {_seconds(time.monotonic() - frame.started)}")

    def _print(self, text: str) -> None:
        self._last_line = time.monotonic()
        try:
            print(f"onnxrefine [{_seconds(self.elapsed()):>7}] {text}", file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed pipe must not turn progress into a crash
            pass


class LiveDisplay(_Stack):
    """A rich Live region on a terminal, one line per running phase; it is drawn while any
    phase runs and cleared when the last one ends (so results print on a clean screen)."""

    def __init__(self, stream: TextIO | None = None, *, keep_after: float = 1.0) -> None:
        super().__init__()
        self.stream = stream if stream is not None else sys.stderr
        self.keep_after = keep_after
        self._live = None
        self._console = None

    # Live's refresh thread takes Live's lock and then ours (to draw the frames), so Live is
    # started and stopped only while this thread does not hold our lock.
    def push(self, name: str, total: int | None = None, detail: str = "") -> None:
        if self._foreign():
            return
        super().push(name, total, detail)
        if self._live is None:
            self._start()

    def pop(self, ok: bool = True) -> None:
        if self._foreign():
            return
        with self._lock:
            if not self._frames:
                return
            frame = self._frames.pop()
            last = not self._frames
        if last and self._live is not None:
            live, self._live = self._live, None
            live.stop()
            seconds = time.monotonic() - frame.started
            if ok and seconds >= self.keep_after:  # a lasting line for each phase worth remembering
                from rich.text import Text

                self._console.print(Text.assemble(("✓ ", "green"), frame.name,
                                                  (f"  {_seconds(seconds)}", "dim")))

    def _start(self) -> None:
        from rich.console import Console
        from rich.live import Live

        if self._console is None:
            self._console = Console(file=self.stream)
        self._live = Live(_Render(self), console=self._console, transient=True,
                          refresh_per_second=8, redirect_stdout=False, redirect_stderr=True)
        self._live.start()


class _Render:
    """Drawn by rich's refresh thread: a snapshot of the frames, one line each, fitted to the
    terminal's width (the detail is cut, never the name, counts or elapsed time)."""

    BAR = 16

    def __init__(self, stack: LiveDisplay) -> None:
        self.stack = stack
        self._spinner = None

    def __rich_console__(self, console, options):
        from rich.progress_bar import ProgressBar
        from rich.spinner import Spinner
        from rich.table import Table
        from rich.text import Text

        if self._spinner is None:
            self._spinner = Spinner("dots", style="cyan")
        frames = self.stack.frames()
        now = time.monotonic()
        names = [Text("  " * depth + frame.name, style="bold" if depth == 0 else "")
                 for depth, frame in enumerate(frames)]
        for name in names:
            name.truncate(32, overflow="ellipsis")
        name_width = max((name.cell_len for name in names), default=0)
        with_bar = any(frame.total for frame in frames) and options.max_width >= 70
        detail_width = max(8, options.max_width - name_width - 9 - (self.BAR + 1 if with_bar else 0) - 3)
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=1, no_wrap=True)
        grid.add_column(width=name_width, no_wrap=True)
        if with_bar:
            grid.add_column(width=self.BAR, no_wrap=True)
        grid.add_column(width=detail_width, no_wrap=True)
        grid.add_column(width=7, justify="right", no_wrap=True)
        for depth, (frame, name) in enumerate(zip(frames, names)):
            counts = ""
            if frame.total:
                counts = f"{frame.done or 0}/{frame.total}"
            elif frame.done is not None:
                counts = str(frame.done)
            note = f"({frame.note})" if frame.note else ""
            detail = Text(" ".join(part for part in (counts, frame.detail, note) if part))
            detail.truncate(detail_width, overflow="ellipsis")
            row = [self._spinner if depth == 0 else Text(""), name]
            if with_bar:
                row.append(ProgressBar(total=frame.total, completed=frame.done or 0, width=self.BAR)
                           if frame.total else Text(""))
            row += [detail, Text(_seconds(now - frame.started), style="dim")]
            grid.add_row(*row)
        yield grid


def display_for_stderr(stream: TextIO | None = None) -> _Stack | None:
    """The display for this process: live on a terminal, plain lines otherwise, or none."""
    stream = stream if stream is not None else sys.stderr
    mode = os.environ.get("ONNXREFINE_PROGRESS", "auto").strip().lower()
    if mode in ("off", "0", "none", "no"):
        return None
    try:
        delay = float(os.environ.get("ONNXREFINE_PROGRESS_DELAY", "1"))
    except ValueError:
        delay = 1.0
    is_terminal = False
    with contextlib.suppress(AttributeError, ValueError, OSError):
        is_terminal = stream.isatty()
    if mode == "live" or (mode != "plain" and is_terminal and os.environ.get("TERM") != "dumb"):
        return LiveDisplay(stream)
    return PlainDisplay(stream, delay=max(0.0, delay))


@contextlib.contextmanager
def showing(display: _Stack | None) -> Iterator[None]:
    """Report to `display` inside the block and close it (live region, ticker) afterwards."""
    if display is None:
        yield
        return
    with display, reporting(display):
        yield
