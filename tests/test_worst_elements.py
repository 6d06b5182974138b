"""The report's worst elements: the first few of a stable sort, found without sorting the output."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from onnxrefine.verify.judge.compare import largest_first
from onnxrefine.verify.judge.verdict import WORST_ELEMENTS, RoundingBound, SetEvidence, judge_output


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0, np.inf]), max_size=40), count=st.integers(0, 15))
def test_largest_first_is_a_stable_sorts_head(values, count):
    array = np.array(values, dtype=np.float64)
    assert largest_first(array, count).tolist() == np.argsort(-array, kind="stable")[:count].tolist()


def test_unexplained_elements_come_first_then_the_largest_differences():
    bound = RoundingBound.for_output(2.0 ** -24, 2, 8, amplifiers=(), jumps=())
    original = np.arange(1, 41, dtype=np.float32)
    candidate = original.copy()
    candidate[::2] = np.nextafter(original[::2], np.float32(np.inf))  # one ulp: explained
    candidate[5] += 1000.0                                 # unexplained
    candidate[7] = np.nan                                  # unexplained, an infinite difference
    judgement = judge_output([SetEvidence(original, original.copy(), candidate, reference=original.astype(np.float64))],
                             bound)
    worst = judgement.worst_elements
    assert len(worst) == WORST_ELEMENTS
    assert [e["index"] for e in worst[:2]] == [[7], [5]] and not worst[0]["explained"] and not worst[1]["explained"]
    gaps = [e["difference"] for e in worst[2:]]
    assert all(e["explained"] for e in worst[2:]) and gaps == sorted(gaps, reverse=True)
    # the largest explained difference, one ulp of [32, 64), taken in index order among its equals
    assert [e["index"] for e in worst[2:6]] == [[32], [34], [36], [38]]
