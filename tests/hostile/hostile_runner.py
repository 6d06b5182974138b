"""Run the bad-input suite: every case against every command it names, in this process.

    python tests/hostile/hostile_runner.py [--commands optimize,verify] [--cases PATTERN]
        [--families a,b] [--json OUT] [--slow]
    (test_hostile.py starts it with --serve to run one case per request)

For each (case, command) it checks: the exit code is one the case expects; no exception escapes
`onnxrefine.cli.main.main` (a traceback) and stderr holds none; a refusal (exit 2) is exactly one
stderr line `onnxrefine: error: ...` matching the case's pattern; a refusal leaves no file behind
(the case folder is as it was), and no run leaves a temp file (in the case folder or TMPDIR); the
input files are unchanged; nothing opened the canary (a FIFO outside the model's folder: a writer
thread blocks on it and wakes only if someone opens it for reading); peak RSS (VmHWM, reset per
run through /proc/self/clear_refs) and wall time stay within limits. It prints a table
(case, command, expected, got, problem) and exits 1 if any row failed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("ONNXREFINE_PROGRESS", "off")

from hostile_cases import COMMANDS, Case, Paths  # noqa: E402

RSS_LIMIT_MB = 1500  # the process's own peak, onnxruntime and numpy included
TIME_LIMIT_S = 60.0


def all_cases() -> list[Case]:
    import catalog_data
    import catalog_files
    import catalog_misc

    cases = catalog_files.cases() + catalog_data.cases() + catalog_misc.cases()
    names = [case.name for case in cases]
    duplicates = {name for name in names if names.count(name) > 1}
    if duplicates:
        raise ValueError(f"duplicate case names: {sorted(duplicates)}")
    return cases


@dataclass
class Row:
    case: str
    family: str
    command: str
    expected: str
    got: str
    problem: str = ""
    seconds: float = 0.0
    rss_mb: float = 0.0
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem


# --- observation helpers ---------------------------------------------------------------------

def _snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root`: kind, size and a content hash for regular files (FIFOs and
    devices are never opened: the canary is one)."""
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                entries[rel] = ("link", os.readlink(full))
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(Path(full).read_bytes()).hexdigest()
                entries[rel] = ("file", info.st_size, digest)
            else:
                entries[rel] = (stat.S_IFMT(info.st_mode),)
    return entries


class Canary:
    """A FIFO whose opening for reading is noticed: a thread blocks opening it for writing."""

    def __init__(self, path: Path):
        self.path = path
        os.mkfifo(path)
        self.opened = False
        self._done = False
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()
        time.sleep(0.02)  # let the writer block in open() before the case runs

    def _wait(self) -> None:
        fd = os.open(self.path, os.O_WRONLY)  # returns once a reader opens the FIFO
        if not self._done:
            self.opened = True
        os.close(fd)

    def close(self) -> bool:
        self._done = True
        reader = None
        if self._thread.is_alive():
            with contextlib.suppress(OSError):
                reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # release the writer
        self._thread.join(5)
        if reader is not None:
            os.close(reader)  # only once the writer has seen it (closed at once, it may not)
        return self.opened


def _reset_peak_rss() -> None:
    with contextlib.suppress(OSError):
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")


def _peak_rss_mb() -> float:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def default_argv(command: str, paths: Paths) -> list[str]:
    model, out = str(paths.model), paths.out
    if command == "optimize":
        return ["optimize", model, "-o", str(out / "model.opt.onnx"), "--explain"]
    if command == "verify":
        return ["verify", model, model]
    if command == "bisect":
        return ["bisect", model, "--out", str(out / "bisect"), "--trials", "1"]
    if command == "reduce":
        return ["reduce", str(paths.folder), "--out", str(out / "reduced"), "--max-checks", "5"]
    raise ValueError(command)


class Hung(BaseException):
    pass


def _alarm(signum, frame):
    raise Hung(f"no answer within {TIME_LIMIT_S + 30:.0f} s")


def limit_memory(gib: float) -> None:
    """Cap this process's address space, so a case that allocates without bound fails its row
    (MemoryError) instead of taking the machine down."""
    import resource

    limit = int(gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


# --- one run ---------------------------------------------------------------------------------

def run_one(case: Case, command: str, workdir: Path) -> Row:
    from onnxrefine.cli.main import main

    root = workdir / f"{case.name}.{command}"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    paths = Paths(root)
    row = Row(case.name, case.family, command, "/".join(map(str, case.expect)), "")
    try:
        case.build(paths)
    except Exception as exc:  # a broken case is a failure of the suite, said as such
        row.got, row.problem = "build", f"case build failed: {type(exc).__name__}: {exc}"
        return row
    paths.out.mkdir(exist_ok=True)
    argv = (case.argv(command, paths) if case.argv else None) or default_argv(command, paths)
    canary = Canary(paths.canary)
    before = _snapshot(root)
    tmp = workdir / "_tmp"
    tmp.mkdir(exist_ok=True)
    old_tempdir, tempfile.tempdir = tempfile.tempdir, str(tmp)
    os.environ["TMPDIR"] = str(tmp)
    stdout, stderr = io.StringIO(), io.StringIO()
    escaped = None
    _reset_peak_rss()
    started = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(TIME_LIMIT_S) + 30)  # a hang becomes a failed row, not a stuck suite
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(argv)
    except SystemExit as exc:  # argparse errors
        code = exc.code if isinstance(exc.code, int) else 2
    except BaseException as exc:  # noqa: BLE001 - any escape is what the suite looks for
        code, escaped = "traceback", "".join(traceback.format_exception_only(type(exc), exc)).strip()
    finally:
        signal.alarm(0)
    row.seconds = time.perf_counter() - started
    row.rss_mb = _peak_rss_mb()
    tempfile.tempdir = old_tempdir
    canary_read = canary.close()
    after = _snapshot(root)
    row.got = str(code)
    err = stderr.getvalue()
    lines = [line for line in err.splitlines() if line.strip()]
    problems = []
    if escaped:
        problems.append(f"exception escaped: {escaped.splitlines()[-1][:200]}")
    if "Traceback (most recent call last)" in err:
        problems.append("traceback on stderr")
    if code not in case.expect:
        detail = lines[-1][:160] if lines else "no message"
        problems.append(f"exit {code}, expected {row.expected} ({detail})")
    if code == 2:
        errors = [line for line in lines if line.startswith("onnxrefine: error:")]
        row.message = errors[0][len("onnxrefine: error: "):] if errors else ""
        if len(errors) != 1 or len(lines) != 1:
            problems.append(f"stderr is not one error line: {err[:200]!r}")
        elif case.message and not re.search(case.message, row.message, re.IGNORECASE):
            problems.append(f"message does not name the problem ({case.message!r}): {row.message[:160]}")
        added = sorted(set(after) - set(before))
        if added:
            problems.append(f"refusal left files: {added[:3]}")
    for rel, entry in before.items():
        if rel.startswith("out" + os.sep) or rel == "secret.bin":
            continue
        if after.get(rel) != entry:
            problems.append(f"input changed: {rel}")
            break
    leftovers = [rel for rel in set(after) - set(before) if rel.endswith(".tmp") or "/.tmp" in rel
                 or os.path.basename(rel).startswith(".")]
    if leftovers:
        problems.append(f"temp files left: {sorted(leftovers)[:3]}")
    # onnxruntime writes its telemetry session id to $TMPDIR/.ses on import and keeps it there
    left_in_tmp = sorted(p.name for p in tmp.iterdir() if p.name != ".ses")
    if left_in_tmp:
        problems.append(f"TMPDIR not empty: {left_in_tmp[:3]}")
        shutil.rmtree(tmp)
    if canary_read:
        problems.append("read the canary outside the model's folder")
    if row.rss_mb > RSS_LIMIT_MB:
        problems.append(f"peak RSS {row.rss_mb:.0f} MB > {RSS_LIMIT_MB}")
    if row.seconds > TIME_LIMIT_S:
        problems.append(f"took {row.seconds:.0f} s > {TIME_LIMIT_S:.0f}")
    if not problems and code == 0 and case.check is not None:
        try:
            found = case.check(paths, command)
        except Exception as exc:
            found = f"check failed: {type(exc).__name__}: {exc}"
        if found:
            problems.append(found)
    row.problem = "; ".join(problems)
    if row.ok:
        shutil.rmtree(root, ignore_errors=True)
    return row


def select(cases: list[Case], commands, pattern: str | None, families, slow: bool) -> list[tuple[Case, str]]:
    chosen = []
    for case in cases:
        if pattern and not re.search(pattern, case.name):
            continue
        if families and case.family not in families:
            continue
        if case.slow and not slow:
            continue
        if case.requires and importlib.util.find_spec(case.requires) is None:
            continue
        for command in case.commands:
            if command in commands:
                chosen.append((case, command))
    return chosen


def table(rows: list[Row]) -> str:
    header = f"{'case':36} {'command':8} {'expected':8} {'got':9} {'s':>5} {'MB':>5}  problem / message"
    lines = [header, "-" * len(header)]
    for row in rows:
        note = row.problem or row.message
        lines.append(f"{row.case[:36]:36} {row.command:8} {row.expected:8} {row.got:9} "
                     f"{row.seconds:5.1f} {row.rss_mb:5.0f}  {'FAIL ' if row.problem else ''}{note[:150]}")
    counts = {}
    for row in rows:
        total, failed = counts.get(row.command, (0, 0))
        counts[row.command] = (total + 1, failed + (not row.ok))
    lines.append("-" * len(header))
    lines.append("  ".join(f"{cmd}: {total - failed}/{total} ok" for cmd, (total, failed) in counts.items()))
    return "\n".join(lines)


def run(commands=COMMANDS, pattern=None, families=None, slow=False, workdir: Path | None = None,
        verbose: bool = False) -> list[Row]:
    chosen = select(all_cases(), commands, pattern, families, slow)
    own = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="hostile-")) if own else workdir
    try:
        rows = []
        for case, command in chosen:
            rows.append(run_one(case, command, workdir))
            if verbose:
                print(f"{rows[-1].case} {command}: {rows[-1].got} {rows[-1].problem[:200]}", file=sys.stderr, flush=True)
        return rows
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def serve(requests_fd: int, rows_fd: int, workdir: Path) -> None:
    """Run cases one at a time on request, for test_hostile.py's one-test-per-case items: each
    request is a JSON line {"case", "command"} on `requests_fd`, each answer one JSON row on
    `rows_fd` (pipes of their own: the commands under test print to stdout and stderr). The
    process stays up between cases, so onnxruntime is imported once, not once per case."""
    cases = {case.name: case for case in all_cases()}
    with os.fdopen(requests_fd, "r") as requests, os.fdopen(rows_fd, "w") as rows:
        for line in requests:
            request = json.loads(line)
            case = cases.get(request["case"])
            if case is None:
                row = Row(request["case"], "", request["command"], "", "", problem="no such case")
            else:
                row = run_one(case, request["command"], workdir)
            rows.write(json.dumps(row.__dict__) + "\n")
            rows.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--cases", default=None, help="regex on case names")
    parser.add_argument("--families", default=None)
    parser.add_argument("--slow", action="store_true")
    parser.add_argument("--json", default=None)
    parser.add_argument("--keep", default=None, help="work folder to keep (failed cases stay there)")
    parser.add_argument("--max-gib", type=float, default=8.0, help="address-space cap for this process")
    parser.add_argument("--serve", default=None, metavar="REQUESTS_FD,ROWS_FD",
                        help="answer requests for single cases on these pipes (needs --keep)")
    args = parser.parse_args(argv)
    limit_memory(args.max_gib)
    workdir = Path(args.keep) if args.keep else None
    if workdir:
        workdir.mkdir(parents=True, exist_ok=True)
    if args.serve:
        requests_fd, rows_fd = (int(fd) for fd in args.serve.split(","))
        serve(requests_fd, rows_fd, workdir or Path(tempfile.mkdtemp(prefix="hostile-")))
        return 0
    rows = run(tuple(args.commands.split(",")), args.cases,
               set(args.families.split(",")) if args.families else None, args.slow, workdir, verbose=True)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([row.__dict__ for row in rows], indent=1))
    return 0 if all(row.ok for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
