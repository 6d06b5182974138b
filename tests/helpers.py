"""Shared test utilities: build small models, run them in onnxruntime with optimizations off."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return session(model).run(None, feeds)


def error_and_bound(model: onnx.ModelProto, feeds: dict, output: str = "y"):
    """(|onnxruntime's run - float64 reference|, the reference's per-element error bound, the reference)
    of `output`, all float64; the bound must be derived on every element."""
    from onnxrefine.verify.reference import bound_of, evaluate_float64

    names = [out.name for out in model.graph.output]
    observed = run(model, feeds)[names.index(output)].astype(np.float64)
    value = evaluate_float64(model, feeds, outputs=[output])[output]
    bound = bound_of(value)
    assert bound is not None and not np.isnan(bound).any()
    reference = np.asarray(value, np.float64)
    return np.abs(observed - reference), bound, reference


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 17, functions=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], functions=list(functions)
    )
    model.ir_version = 8 if opset <= 17 else 9
    return model


def tensor(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def value_info(name: str, dtype=TensorProto.FLOAT, shape=None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def stress_inputs(shape, dtype=np.float32, seed: int = 0) -> list[np.ndarray]:
    """Random normal, negatives, large magnitudes and signed zeros for one input."""
    rng = np.random.default_rng(seed)
    normal = rng.standard_normal(shape).astype(dtype)
    big = (rng.standard_normal(shape) * (100.0 if dtype == np.float16 else 1e4)).astype(dtype)
    zeros = np.where(rng.random(shape) < 0.5, -0.0, 0.0).astype(dtype)
    return [normal, -np.abs(normal), big, zeros]


def op_types(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def assert_valid_like(original: onnx.ModelProto, optimized: onnx.ModelProto) -> None:
    """The optimized model passes every check the original passes (checker, strict inference)."""
    for check in (
        lambda m: onnx.checker.check_model(m, full_check=True),
        lambda m: onnx.checker.check_model(m),
        lambda m: onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True),
    ):
        try:
            check(original)
        except Exception:
            continue
        check(optimized)


def aborting_inference_model() -> onnx.ModelProto:
    """A 3x3 pool over a 1-pixel input, then a strided Slice: onnx's C++ shape inference asserts on
    it (SIGABRT, no Python handler runs)."""
    return helper.make_model(helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3, 3]),
         helper.make_node("Slice", ["p", "st", "en", "ax", "sp"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in (("st", 0), ("en", 2), ("ax", 2), ("sp", 2))]),
        opset_imports=[helper.make_opsetid("", 17)])


def plant_pass(monkeypatch, spec) -> str:
    """Register a test-only pass for one test (monkeypatch undoes it: a plain assignment would
    outlive the test in its xdist worker) and return its name."""
    from onnxrefine.passes import registry

    registry._load_pass_modules()  # the real passes first, so that they do not replace the planted one
    monkeypatch.setitem(registry._REGISTRY, spec.name, spec)
    return spec.name


def plant_rules(monkeypatch, rules: dict) -> Callable[[str], str]:
    """Each rule of `rules` (name -> Rule) as a test-only pass `planted_NAME` of its own; returns
    the name -> pass-name mapping the tests hand to `--passes`."""
    from onnxrefine.passes.registry import PassSpec

    for name, rule in rules.items():
        plant_pass(monkeypatch, PassSpec(f"planted_{name}", "test only", rules=(rule,), default=False))
    return lambda name: f"planted_{name}"


def relu_to_abs(m, ctx):
    """A deliberately wrong rule: Relu(x) -> Abs(x) differs for every negative x."""
    from onnxrefine.rewrite.rule import Replacement

    node = ctx.node("Abs", [m["x"]])
    return Replacement([node], {m.root.outputs[0]: node.outputs[0]})


def plant_wrong_pass(monkeypatch, name: str) -> str:
    """A test-only pass `name` whose one rule is relu_to_abs (a real bug verification must catch)."""
    from onnxrefine.passes.registry import PassSpec
    from onnxrefine.rewrite.pattern import Op, Var
    from onnxrefine.rewrite.rule import Rule

    rule = Rule("relu_to_abs", Op("Relu", Var("x")), relu_to_abs)
    plant_pass(monkeypatch, PassSpec(name, "test only", rules=(rule,)))
    return name


def on_a_terminal(argv: list[str], env: dict) -> tuple[int, str]:
    """Run `argv` with stdout a terminal (a pseudo-terminal; stderr discarded): its exit code and
    what it printed, colour codes and carriage returns taken out."""
    import os
    import pty
    import re
    import subprocess

    leader, follower = pty.openpty()
    process = subprocess.Popen(argv, stdout=follower, stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closes when the command exits
            break
        if not chunk:
            break
        chunks.append(chunk)
    code = process.wait(timeout=120)
    os.close(leader)
    return code, re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode()).replace("\r", "")
