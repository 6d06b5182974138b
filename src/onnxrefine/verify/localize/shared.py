"""Localisation on the float64 evaluations the output check makes anyway (verify_models).

The output check evaluates the original in float64 on every input set where the outputs differ
(all of them, for most optimized models), and that evaluation computes every intermediate value
too: localisation observes it (`evaluate_float64(observe=...)`) instead of evaluating the original
once more on that set. localize() then runs its own evaluation only on the other sets. The
judgement is the same (tests/test_localize_shared_reference.py): the same values, judged in the
same order, against the same float64 values.
"""

from __future__ import annotations

import time

import onnx

from onnxrefine.verify.localize.layerwise import DEFAULT_BATCH_BYTES, Localizer, prepare


class EarlyLocalisation:
    """Begun by verify_models before its output check's float64 evaluations (start), watching each
    of them (observer); handed to localize() after, which finishes it."""

    def __init__(self, original, candidate, seed: int, load):
        # load(given, role) -> the whole ModelProto or None (too large): called when the output
        # check reaches its float64 evaluations (its onnxruntime runs are done by then), not
        # before, so the two whole models are not held during those runs
        self._given, self._load, self._loaded = (original, candidate), load, False
        self.original: onnx.ModelProto | None = None
        self.candidate: onnx.ModelProto | None = None
        self.seed = seed
        self.section: dict | None = None
        self.localizer: Localizer | None = None
        self.labels: set = set()
        self.seconds = 0.0

    def load(self) -> tuple:
        """(original, candidate) whole protos, loaded once; None where one is too large."""
        if not self._loaded:
            self._loaded = True
            self.original = self._load(self._given[0], "original model")
            if self.original is not None:
                self.candidate = self._load(self._given[1], "candidate model")
        return self.original, self.candidate

    def start(self, labelled_sets, u: float, perturb_count: int) -> None:
        began = time.perf_counter()
        original, candidate = self.load()
        if original is not None and candidate is not None:
            try:
                self.section, self.localizer = prepare(original, candidate, labelled_sets, u, perturb_count,
                                                        self.seed, DEFAULT_BATCH_BYTES)
            except Exception:  # noqa: BLE001 - localize() prepares again after the output check and
                # reports it there, as it did before localisation began early
                self.section, self.localizer = None, None
        self.seconds += time.perf_counter() - began

    def observer(self, label: str, set_index: int, feeds):
        """(observe, finish) for the output check's evaluation of this set, or None."""
        if self.localizer is None or not self.localizer.pairs or self.localizer.failure is not None:
            return None
        from onnxrefine.verify.evidence import has_nonfinite as _has_nonfinite, is_extreme as _is_extreme

        observe, finish = self.localizer.set_observer(set_index, feeds, extreme=_is_extreme(feeds),
                                                      nonfinite=_has_nonfinite(feeds), label=label)
        self.labels.add(label)

        def timed(name, value):
            began = time.perf_counter()
            observe(name, value)
            self.seconds += time.perf_counter() - began

        def done(exc) -> None:
            began = time.perf_counter()
            finish(exc)
            self.seconds += time.perf_counter() - began

        return timed, done
