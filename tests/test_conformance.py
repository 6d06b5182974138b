"""Conformance: the default pipeline over the onnx package's backend node tests.

Wherever onnxruntime (optimizations off) runs the original model and matches the expected outputs
at the backend tolerance, the optimized model must run and match them too. Counts (cases, ran,
changed, regressions, skips by reason) are printed and written as JSON under pytest's tmp dir.

The corpus is onnx/backend/test/data/node/*/ (model.onnx, test_data_set_*/input_*.pb and
output_*.pb) when the installed onnx has it; the wheel does not, so otherwise the same cases are
generated with onnx.backend.test.case.node.collect_testcases (~30 s) once and cached in pytest's
cache directory.

CI runs a fixed-seed sample of SAMPLE_SIZE cases in SAMPLE_SHARDS shards (pytest-xdist spreads
them); `--runslow` runs the whole corpus. As a script, `python tests/test_conformance.py` runs the
whole corpus and prints the totals.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickle
import random
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import onnxrefine

RTOL, ATOL = 1e-3, 1e-7
SEED = 20261129
SAMPLE_SIZE = 300
SAMPLE_SHARDS = 4
FULL_SHARDS = 16


# --- the corpus ----------------------------------------------------------------------------------


def _read_tensor(path: Path) -> np.ndarray:
    return numpy_helper.to_array(onnx.TensorProto.FromString(path.read_bytes()))


def _indexed(folder: Path, prefix: str) -> list[Path]:
    return sorted(folder.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))


def _non_tensor_io(model: onnx.ModelProto) -> bool:
    return any(not vi.type.HasField("tensor_type") for vi in [*model.graph.input, *model.graph.output])


def _load_data_dir(root: Path) -> list[dict]:
    cases = []
    for case_dir in sorted(p for p in root.iterdir() if (p / "model.onnx").exists()):
        model_bytes = (case_dir / "model.onnx").read_bytes()
        case = {"name": case_dir.name, "model": model_bytes, "data_sets": [], "skip": None}
        if _non_tensor_io(onnx.ModelProto.FromString(model_bytes)):
            case["skip"] = "sequence/optional/map inputs or outputs"
        else:
            for data_dir in sorted(case_dir.glob("test_data_set_*")):
                inputs = [_read_tensor(p) for p in _indexed(data_dir, "input")]
                outputs = [_read_tensor(p) for p in _indexed(data_dir, "output")]
                case["data_sets"].append((inputs, outputs))
        cases.append(case)
    return cases


def _generate_cases() -> list[dict]:
    from onnx.backend.test.case import node as node_cases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        collected = node_cases.collect_testcases(None)
    cases = []
    for case in collected:
        if case.model is None:
            continue
        entry = {"name": case.name, "model": case.model.SerializeToString(), "data_sets": [], "skip": None}
        if _non_tensor_io(case.model):
            entry["skip"] = "sequence/optional/map inputs or outputs"
        else:
            for inputs, outputs in case.data_sets or []:
                values = [_as_array(v) for v in [*inputs, *outputs]]
                if any(v is None for v in values):
                    entry["skip"] = "non-tensor test data"
                    break
                entry["data_sets"].append((values[: len(inputs)], values[len(inputs):]))
        cases.append(entry)
    return sorted(cases, key=lambda c: c["name"])


def _as_array(value) -> np.ndarray | None:
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    return None  # sequences, optionals, maps


def load_corpus(cache_dir: Path) -> list[dict]:
    data_root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    if data_root.is_dir() and any(data_root.iterdir()):
        return _load_data_dir(data_root)
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache_file = cache_dir / f"onnx-{onnx.__version__}-node-corpus-v2.pkl"
    # One xdist worker generates; the others wait on the lock and read its file.
    with open(cache_dir / "node-corpus.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cache_file.exists():
            cases = _generate_cases()
            fd, tmp = tempfile.mkstemp(dir=cache_dir)
            with os.fdopen(fd, "wb") as f:
                pickle.dump(cases, f)
            os.replace(tmp, cache_file)
    with open(cache_file, "rb") as f:
        return pickle.load(f)


# --- one case ------------------------------------------------------------------------------------


def _session(model_bytes: bytes) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _matches(got: list, expected: list) -> str | None:
    """None when every output matches at the backend tolerance, else why not."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for index, (g, e) in enumerate(zip(got, expected)):
        g = np.asarray(g)
        if g.shape != e.shape:
            return f"output {index}: shape {g.shape}, expected {e.shape}"
        if e.dtype.kind in "fc":
            if g.dtype != e.dtype:
                return f"output {index}: dtype {g.dtype}, expected {e.dtype}"
            try:
                np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL, equal_nan=True)
            except AssertionError:
                return f"output {index}: values differ"
        elif e.dtype.kind in "OUS":
            if g.tolist() != e.tolist():
                return f"output {index}: values differ"
        elif g.dtype != e.dtype or not np.array_equal(g, e):
            return f"output {index}: values or dtype differ"
    return None


def _run_all(model_bytes: bytes, model: onnx.ModelProto, data_sets) -> str | None:
    """None when onnxruntime runs `model_bytes` and matches every data set, else why not."""
    try:
        session = _session(model_bytes)
    except Exception as exc:
        return f"does not load: {str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}"
    names = [i.name for i in session.get_inputs()]
    for inputs, outputs in data_sets:
        graph_inputs = [vi.name for vi in model.graph.input]
        feeds = {name: value for name, value in zip(graph_inputs, inputs) if name in names}
        try:
            got = session.run(None, feeds)
        except Exception as exc:
            return f"does not run: {str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}"
        why = _matches(got, outputs)
        if why is not None:
            return why
    return None


def check_case(case: dict) -> dict:
    """The verdict for one case: status is skipped / original-fails / ok / regression."""
    result = {"name": case["name"], "changed": False, "status": None, "detail": None}
    if case["skip"] is not None:
        return {**result, "status": "skipped", "detail": case["skip"]}
    if not case["data_sets"]:
        return {**result, "status": "skipped", "detail": "no test data"}
    model = onnx.ModelProto.FromString(case["model"])
    why = _run_all(case["model"], model, case["data_sets"])
    if why is not None:
        return {**result, "status": "original-fails", "detail": why}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            optimized, report = onnxrefine.optimize_with_report(model)
    except Exception as exc:  # the optimizer must not crash on a model onnxruntime runs
        return {**result, "status": "regression", "detail": f"optimize raised {type(exc).__name__}: {exc}"[:300]}
    result["changed"] = bool(report.log.applied)
    result["rewrites"] = dict(report.log.counts())
    optimized_bytes = optimized.SerializeToString()
    # The graph inputs keep their order, so the stored inputs still line up.
    why = _run_all(optimized_bytes, optimized, case["data_sets"])
    if why is not None:
        return {**result, "status": "regression", "detail": why}
    return {**result, "status": "ok"}


def summarize(results: list[dict]) -> dict:
    skipped: dict[str, int] = {}
    for r in results:
        if r["status"] == "skipped":
            skipped[r["detail"]] = skipped.get(r["detail"], 0) + 1
    ran = [r for r in results if r["status"] in ("ok", "regression")]
    return {
        "cases": len(results),
        "ran": len(ran),
        "changed": sum(1 for r in ran if r["changed"]),
        "regressions": [f"{r['name']}: {r['detail']}" for r in results if r["status"] == "regression"],
        "original_fails": sum(1 for r in results if r["status"] == "original-fails"),
        "skipped": skipped,
    }


# --- pytest --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def corpus(request) -> list[dict]:
    return load_corpus(Path(request.config.cache.mkdir("onnxrefine-conformance")))


def _sample(names: list[str]) -> list[str]:
    return sorted(random.Random(SEED).sample(names, min(SAMPLE_SIZE, len(names))))


def _run_shard(corpus, names: list[str], shard: int, shards: int, label: str, tmp_path_factory) -> None:
    by_name = {c["name"]: c for c in corpus}
    mine = names[shard::shards]
    results = [check_case(by_name[name]) for name in mine]
    summary = summarize(results)
    out = tmp_path_factory.mktemp("conformance") / f"{label}-shard{shard}.json"
    out.write_text(json.dumps({"summary": summary, "results": results}, indent=1, default=str))
    print(f"\nconformance {label} shard {shard}/{shards}: cases={summary['cases']} ran={summary['ran']} "
          f"changed={summary['changed']} regressions={len(summary['regressions'])} "
          f"original_fails={summary['original_fails']} skipped={summary['skipped']} -> {out}")
    assert not summary["regressions"], "\n".join(summary["regressions"])


@pytest.mark.parametrize("shard", range(SAMPLE_SHARDS))
def test_conformance_sample(corpus, shard, tmp_path_factory):
    _run_shard(corpus, _sample([c["name"] for c in corpus]), shard, SAMPLE_SHARDS, "sample", tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("shard", range(FULL_SHARDS))
def test_conformance_full(corpus, shard, tmp_path_factory):
    _run_shard(corpus, [c["name"] for c in corpus], shard, FULL_SHARDS, "full", tmp_path_factory)


def test_corpus_is_not_empty(corpus):
    # a silently empty corpus would make the sample vacuous
    assert len(corpus) > 1000


# --- script --------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    positional = [a for a in argv[1:] if not a.startswith("--")]
    cache = Path(positional[0]) if positional else Path(".pytest_cache/d/onnxrefine-conformance")
    corpus = load_corpus(cache)
    names = [c["name"] for c in corpus]
    if "--sample" in argv:
        names = _sample(names)
    by_name = {c["name"]: c for c in corpus}
    results = []
    for name in names:
        with contextlib.redirect_stdout(sys.stderr):
            results.append(check_case(by_name[name]))
    summary = summarize(results)
    print(json.dumps(summary, indent=1))
    return 1 if summary["regressions"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
