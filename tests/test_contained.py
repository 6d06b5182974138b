"""onnx's shape inference, contained in a child that serves one request after another."""

from __future__ import annotations

import os
import time

import onnx
import pytest
from helpers import aborting_inference_model
from onnx import TensorProto, helper

from onnxrefine.ir import contained

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="containment forks (POSIX only)")


def _relu(width: int) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)])


def _width(model: onnx.ModelProto) -> int:
    return model.graph.output[0].type.tensor_type.shape.dim[1].dim_value


@pytest.fixture
def forks(monkeypatch):
    """The forks made while the test runs, from a fresh worker on."""
    contained.close_worker()
    made = []
    real = os.fork

    def counting():
        pid = real()
        if pid:
            made.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", counting)
    yield made
    contained.close_worker()


def test_one_child_serves_many_inferences(forks):
    assert [_width(contained.infer_shapes(_relu(width))) for width in (3, 5, 7)] == [3, 5, 7]
    assert len(forks) == 1


def test_after_a_crash_the_next_inference_gets_a_new_child(forks):
    assert _width(contained.infer_shapes(_relu(2))) == 2
    with pytest.raises(contained.NativeCrash, match="SIGABRT"):
        contained.infer_shapes(aborting_inference_model(), strict_mode=False)
    assert _width(contained.infer_shapes(_relu(4))) == 4
    assert len(forks) == 2


def test_an_idle_child_leaves_and_is_replaced(forks, monkeypatch):
    monkeypatch.setattr(contained, "WORKER_IDLE_SECONDS", 0.05)
    assert _width(contained.infer_shapes(_relu(2))) == 2
    time.sleep(1.0)  # it leaves on its own once idle
    assert _width(contained.infer_shapes(_relu(6))) == 6
    assert len(forks) == 2


def test_a_request_left_unread_by_an_idle_exit_is_asked_again(forks, monkeypatch):
    """The child may leave idle just as a request is written: an exit 0 without a reply is no
    crash, and a new child answers."""
    monkeypatch.setattr(contained, "WORKER_IDLE_SECONDS", 0.05)
    monkeypatch.setattr(contained._Worker, "alive", lambda self: True)  # it looked alive...
    assert _width(contained.infer_shapes(_relu(2))) == 2
    time.sleep(1.0)  # ...and left before the request
    assert _width(contained.infer_shapes(_relu(8))) == 8
    assert len(forks) == 2


def test_a_forked_process_does_not_share_its_parents_child(forks):
    assert _width(contained.infer_shapes(_relu(2))) == 2
    pid = os.fork()
    if pid == 0:  # the forked process: its own child answers, its parent's is left alone
        try:
            ok = _width(contained.infer_shapes(_relu(9))) == 9
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert _width(contained.infer_shapes(_relu(3))) == 3  # the parent's pipes are still in step


def _print_and_say_whether_gc_runs() -> bool:
    import gc

    print("from the child")
    return gc.isenabled()


def test_a_contained_child_writes_nothing_to_the_parents_streams_and_collects_nothing(capfd):
    """The standard streams may be a test runner's channel to its controller, and the parent's
    garbage, collected in the child, would run the parent's finalizers there."""
    assert contained.call(_print_and_say_whether_gc_runs, what="the check") is False
    assert "from the child" not in capfd.readouterr().out


def test_a_signal_while_the_child_is_reaped_at_exit_ends_it_quietly(forks, monkeypatch):
    """SIGTERM landing while the exit handler waits for the child (the CLI's handler raises):
    the child is killed and reaped, and the exit handler raises nothing."""
    assert _width(contained.infer_shapes(_relu(2))) == 2
    real_waitpid = os.waitpid
    interrupted = []

    def interrupted_once(pid, options):
        if not interrupted:
            interrupted.append(pid)
            raise KeyboardInterrupt
        return real_waitpid(pid, options)

    monkeypatch.setattr(os, "waitpid", interrupted_once)
    contained.close_worker()
    assert interrupted == forks
    with pytest.raises(ChildProcessError):
        real_waitpid(forks[0], os.WNOHANG)  # reaped


_INTERRUPTED_WHILE_FORKING = """
import os, signal, sys
import onnx
from onnx import TensorProto, helper
from onnxrefine.ir import contained
# Ctrl-C landing while os.fork() runs its hooks (logging's lock release among them)
os.register_at_fork(after_in_parent=lambda: os.kill(os.getpid(), signal.SIGINT))
model = helper.make_model(helper.make_graph(
    [helper.make_node("Relu", ["x"], ["y"])], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 17)])
try:
    contained.infer_shapes(model)
except KeyboardInterrupt:
    sys.exit(42)
sys.exit(0)
"""


def test_a_ctrl_c_while_forking_the_child_interrupts_the_run():
    """Python runs the at-fork hooks with signals deliverable; a KeyboardInterrupt raised inside one
    is printed as 'Exception ignored' and lost, and the run would go on as if never interrupted.
    With the signals held across the fork, the interrupt arrives in the caller's own code."""
    import subprocess
    import sys

    ran = subprocess.run([sys.executable, "-c", _INTERRUPTED_WHILE_FORKING],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 42, ran.stderr
    assert "Exception ignored" not in ran.stderr and "Traceback" not in ran.stderr, ran.stderr
