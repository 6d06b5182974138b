"""`python -m onnxrefine` and the `onnxrefine` command.

The command's own modules, and the native libraries under them, are imported inside `run` (in
the supervisor's worker, after its fork), so that a process too small to load them (an
address-space limit: `ulimit -v`, `prlimit --as`) ends in one line and exit 2, not in a traceback
from the middle of an import.
"""

import sys


def _memory_limited() -> bool:
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return False
    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY


def _load_command():
    """The CLI's main, once the native libraries and the CLI's modules are imported; or the exit
    code of a process too small to import them."""
    try:
        from onnxrefine import load_native

        load_native()
        from onnxrefine.cli.main import main
    except (MemoryError, ImportError, SystemError) as exc:
        if not (isinstance(exc, MemoryError) or _memory_limited()):
            raise
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"onnxrefine: error: not enough memory to start ({text})", file=sys.stderr)
        return 2
    return main


def _command() -> int:
    """The command in the supervisor's worker: imported there, after the fork."""
    main = _load_command()
    return main if isinstance(main, int) else main(freeze_startup=True)


def _supervising() -> bool:
    import os

    return hasattr(os, "fork") and os.environ.get("ONNXREFINE_NO_SUPERVISOR", "") in ("", "0")


def run() -> int:
    import gc
    import signal

    gc.disable()  # until start-up is frozen (cli.main.main): importing makes no garbage
    # A signal before the command's handlers are in place is collected: SIGTERM/SIGHUP would
    # otherwise end the process before any clean-up of ours, and a KeyboardInterrupt raised inside
    # an extension module's import can be swallowed there ("Exception ignored in ...").
    arrived: list[int] = []
    held = [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)]
    previous = {signum: signal.signal(signum, lambda signum, frame: arrived.append(signum)) for signum in held}
    if _supervising():
        # The fork comes before the heavy imports (onnxrefine.load_native, the CLI's modules): the
        # worker builds its own heap instead of faulting in the supervisor's page by page (0.02-0.03
        # s of CPU a run). The supervisor forwards what it collected; the worker holds signals
        # blocked until the command's handlers take them.
        return exit_now(supervised(_command, arrived, previous))
    try:
        main = _load_command()
    finally:
        if arrived:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    if arrived:
        print("onnxrefine: interrupted", file=sys.stderr)
        return 128 + arrived[0]
    if isinstance(main, int):
        return main
    return exit_now(supervised(lambda: main(freeze_startup=True), arrived, previous))


_CRASHES = ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL")


def supervised(work, arrived: list | None = None, previous: dict | None = None) -> int:
    """Run `work()` (the command) in a forked child and return its exit code, so that a crash in
    native code (onnxruntime or onnx segfaulting or asserting on a model) ends in one line and
    exit 3 instead of a silent death by signal. The child has its own process group, and the
    signals a user sends (Ctrl-C, SIGTERM, SIGHUP) are passed to it once, so its clean-up runs
    as without the supervisor; it dies with the supervisor (prctl PR_SET_PDEATHSIG). Where the
    platform cannot fork, or with ONNXREFINE_NO_SUPERVISOR=1, `work()` runs in this process."""
    import os
    import signal

    arrived = [] if arrived is None else arrived  # signals collected since start-up (run)
    previous = previous or {}
    if not _supervising():
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if arrived:
            print("onnxrefine: interrupted", file=sys.stderr)
            return 128 + arrived[0]
        return work()
    import tempfile

    from onnxrefine import atomic

    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    # The worker notes each temp file it makes beside an output here; after a crash (which runs no
    # clean-up) the supervisor removes those still there. The list has no name: nothing of it is
    # left behind, even when the supervisor itself is killed.
    journal_fd, journal = tempfile.mkstemp(prefix="onnxrefine-temps.", suffix=".list")
    os.unlink(journal)
    pid = os.fork()
    if pid == 0:
        # Those collected so far are the parent's to forward; only what reaches this process from
        # now until its handlers change is its own.
        before = len(arrived)
        # One thread now: blocked, the signals wait for the command's own handlers (cli.main.main
        # releases them), the default dispositions back in place beneath them.
        held = list(previous)
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in arrived[before:]:
            os.kill(os.getpid(), signum)
        code = 3
        try:
            os.setpgid(0, 0)
            _die_with(parent)
            atomic.journal_to(journal_fd)
            code = work()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - main() reports its own errors; this is the rest
            import traceback

            traceback.print_exc()
        exit_now(code)
        os._exit(code)

    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), forward)
    for signum in list(arrived):  # collected between start-up and the handlers above
        forward(signum, None)
    try:
        _, status = os.waitpid(pid, 0)  # retried by Python when a forwarded signal interrupts it
        if not os.WIFEXITED(status):  # read by position: the worker's writes moved the shared offset
            atomic.sweep_journal(os.pread(journal_fd, os.fstat(journal_fd).st_size, 0))
    finally:
        os.close(journal_fd)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    died = os.WTERMSIG(status)
    name = signal.Signals(died).name
    if name in _CRASHES:
        print(f"onnxrefine: internal error: the process crashed ({name}) in native code (onnxruntime or "
              "onnx); outputs it had not committed were not written", file=sys.stderr, flush=True)
        return 3
    return 128 + died


def _die_with(parent: int) -> None:
    """Linux: this process gets SIGKILL when `parent` dies (a killed supervisor leaves no worker
    behind to write outputs later)."""
    import os

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return
    if os.getppid() != parent:  # the supervisor died before the prctl took effect
        os._exit(137)


def exit_now(code: int) -> int:
    """End the process once the command's work is done: its outputs are committed, its streams
    flushed and its exit handlers run (temp folders, worker pools), but the interpreter does not
    tear down every module and object of a run that may hold a whole model (0.05-0.1 s on small
    models, more on large ones). Returns only where the exit handlers cannot be run apart."""
    import os

    run_exit_handlers = getattr(__import__("atexit"), "_run_exitfuncs", None)  # CPython's own hook
    if run_exit_handlers is None or os.environ.get("ONNXREFINE_FULL_TEARDOWN"):
        return code
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away after the last line: outputs are committed
        code = code or 141
    except (OSError, ValueError):
        pass
    run_exit_handlers()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(run())
