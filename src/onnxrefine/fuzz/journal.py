"""A campaign folder's memory: its settings (campaign.json) and one journal line per finished case
(cases.jsonl), so that `onnxrefine fuzz --resume` continues an interrupted campaign and ends with
the summary an uninterrupted run would have given.

A journal line is appended only after the case's bundle (if any) is in place, and a torn last line
(power loss mid-write) is ignored, so a case is either complete in the journal or re-run. Filing is
order-independent: of the cases that share a (step, signature), the one with the lowest index is
the bundle, whatever order parallel workers finish in, so resumed, parallel and serial campaigns
file the same bundles.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict

from onnxrefine.errors import BadInputError

SETTINGS_FILE = "campaign.json"
JOURNAL_FILE = "cases.jsonl"
FORMAT = 1
KEPT = ("index", "seed", "step", "status", "pattern", "fired", "mutated_input", "signature", "kind",
        "error", "seconds", "node")


def _load_settings(data: dict):
    from onnxrefine.fuzz.settings import CampaignSettings

    data = dict(data)
    if data.get("passes") is not None:
        data["passes"] = tuple(data["passes"])
    return CampaignSettings(**data)


def stored_settings(out_dir: str):
    path = os.path.join(out_dir, SETTINGS_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as handle:
            data = json.load(handle)
        return _load_settings(data["settings"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInputError(f"{path}: not a campaign settings file ({type(exc).__name__})") from None


def count_entries(out_dir: str) -> int:
    return len({entry["index"] for entry in read_entries(out_dir)})


def open_campaign(out_dir: str, settings, resume: bool):
    """The campaign's settings: stored ones when resuming (a differing `settings` is an error);
    new ones are stored, refusing a folder that already holds another campaign."""
    from onnxrefine.atomic import write_atomic

    stored = stored_settings(out_dir)
    if resume:
        if stored is None:
            raise BadInputError(f"--resume: {out_dir} holds no campaign ({SETTINGS_FILE} missing)")
        if settings is not None and settings != stored:
            changed = [k for k, v in asdict(settings).items() if asdict(stored)[k] != v]
            raise BadInputError(f"--resume: {', '.join(changed)} differ from the campaign in {out_dir}; "
                                "drop those options to resume it as it was started")
        return stored
    done = count_entries(out_dir) if stored is not None else 0
    if stored is not None and (done or stored != settings):
        raise BadInputError(f"--out {out_dir} already holds a campaign ({done} of {stored.cases} cases "
                            "done): add --resume to continue it, or choose another folder")
    write_atomic(os.path.join(out_dir, SETTINGS_FILE),
                 json.dumps({"format": FORMAT, "settings": asdict(settings)}, indent=2) + "\n")
    return settings


def read_entries(out_dir: str) -> list[dict]:
    path = os.path.join(out_dir, JOURNAL_FILE)
    entries = []
    if not os.path.isfile(path):
        return entries
    with open(path) as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:   # a line torn by a crash mid-write: that case re-runs
                continue
            if isinstance(entry, dict) and isinstance(entry.get("index"), int) and "status" in entry:
                entries.append(entry)
    return entries


class Writer:
    """Appends journal lines; flushed per line (a killed driver loses nothing it journaled),
    fsync-ed with each summary save (a rebooted machine loses at most that interval)."""

    def __init__(self, out_dir: str):
        path = os.path.join(out_dir, JOURNAL_FILE)
        self._handle = open(path, "a")
        if self._handle.tell():   # a torn last line must not glue onto the next entry
            with open(path, "rb") as check:
                check.seek(-1, os.SEEK_END)
                if check.read(1) != b"\n":
                    self._handle.write("\n")

    def append(self, result: dict, bundle: str | None) -> None:
        entry = {key: result[key] for key in KEPT if result.get(key) is not None}
        if bundle:
            entry["bundle"] = bundle
        self._handle.write(json.dumps(entry) + "\n")
        self._handle.flush()

    def sync(self) -> None:
        os.fsync(self._handle.fileno())

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._handle.close()


class Filing:
    """Which case is the bundle of each (step, signature): the lowest index seen."""

    def __init__(self, out_dir: str, summary):
        self._out_dir, self._summary = out_dir, summary
        self._filed: dict[tuple[str, str], tuple[int, str]] = {}

    def _take(self, result: dict, path: str | None) -> bool:
        key = (result["step"], result.get("signature", ""))
        current = self._filed.get(key)
        if current is not None and current[0] <= result["index"]:
            self._summary.duplicates += 1
            return False
        if current is not None:
            self._summary.duplicates += 1
            self._remove(current[1])
        if path is not None:
            self._filed[key] = (result["index"], path)
        return True

    def _remove(self, path: str) -> None:
        # Only a case folder inside this campaign's folder is ever removed.
        if os.path.dirname(os.path.abspath(path)) == os.path.abspath(self._out_dir) and \
                os.path.basename(path).startswith("case_"):
            shutil.rmtree(path, ignore_errors=True)

    def _publish(self) -> None:
        self._summary.bundles = [path for _, path in sorted(self._filed.values())]

    def replay(self, entry: dict) -> None:
        if entry["status"] not in ("mismatch", "crashed"):
            return
        if entry.get("bundle"):
            self._take(entry, entry["bundle"])
            self._publish()
        else:   # journaled as a duplicate of a lower-index case
            self._summary.duplicates += 1

    def file(self, result: dict, write) -> str | None:
        """Write the bundle via `write()` when this case is its signature's lowest index."""
        if not self._take(result, None):
            return None
        path = write()
        if path is None:
            return None
        self._filed[(result["step"], result.get("signature", ""))] = (result["index"], path)
        self._publish()
        return path
