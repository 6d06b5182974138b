"""Each pass is declared once (PASSES in its module): the schedule, the pass list, README's table
and the fuzz targets all read that declaration, and the schedule runs the phases it names."""

from __future__ import annotations

import importlib
import pkgutil
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import make_model, tensor, value_info
from onnx import helper

import onnxrefine.passes
from onnxrefine.cli.optimize_cmd import passes_markdown
from onnxrefine.errors import BadInputError
from onnxrefine.fuzz.patterns import PATTERNS, TARGET_PATTERNS
from onnxrefine.ir import io
from onnxrefine.ir.budget import ConstantBudget
from onnxrefine.passes import registry
from onnxrefine.passes.pipeline import ordered_specs, run_passes
from onnxrefine.passes.registry import (
    CLEANUP, GRAPH, INTERFACE, PHASES, RULES, PassSpec, all_passes, declared_passes, default_pass_names, get_pass,
)
from onnxrefine.rewrite.pattern import Op, Var
from onnxrefine.rewrite.rule import EXACT, REASSOCIATING, Rule

# The default schedule, phase by phase, in the order one round runs it. A change here is a change
# of what every optimization does: make it on purpose.
DEFAULT_SCHEDULE = {
    RULES: [
        "eliminate_consecutive_idempotent_ops", "eliminate_exact_cast_chain", "eliminate_identity",
        "eliminate_nop_cast", "eliminate_nop_concat", "eliminate_nop_dropout", "eliminate_nop_expand",
        "eliminate_nop_flatten", "eliminate_nop_monotone_argmax", "eliminate_nop_pad", "eliminate_nop_reshape",
        "eliminate_nop_slice", "eliminate_nop_split", "eliminate_nop_transpose", "eliminate_nop_with_unit", "fuse_cast_into_constant_of_shape", "rewrite_where",
        "cast_like_to_cast", "eliminate_float_add_zero", "eliminate_where_with_constant_condition", "merge_reshape_unit_axes",
        "reshape_through_transpose", "transpose_to_reshape", "fuse_concat_into_reshape", "fuse_consecutive_concats",
        "fuse_consecutive_log_softmax", "fuse_consecutive_reduce_unsqueeze", "fuse_consecutive_slices",
        "fuse_consecutive_squeeze_unsqueeze", "fuse_consecutive_squeezes", "fuse_consecutive_transposes", "fuse_consecutive_unsqueezes",
        "fuse_matmul_add_bias_into_gemm", "fuse_pad_into_conv", "fuse_pad_into_pool", "fuse_qkv",
        "fuse_transpose_into_gemm", "fuse_bn_into_conv", "fuse_bn_into_gemm", "keep_quantized_layers",
        "fuse_mul_into_conv", "fuse_add_bias_into_conv",
    ],
    GRAPH: [
        "extract_constant_to_initializer", "eliminate_if_with_const_cond", "fold_constants", "fold_shapes",
        "merge_dim_reads", "eliminate_reshape_around_elementwise", "split_to_sequence_as_split",
    ],
    CLEANUP: [
        "eliminate_common_subexpression", "eliminate_duplicate_initializer", "eliminate_deadend",
        "eliminate_unused_initializer",
    ],
    INTERFACE: [],  # interface edits are asked for, never default
}

# The passes the targeted fuzz generator has a pattern for. Campaigns pick a rotating pattern by
# `sorted(TARGET_PATTERNS)[seed % n]`, so adding one changes which case gets which pattern.
FUZZED = {
    "eliminate_common_subexpression", "eliminate_consecutive_idempotent_ops", "eliminate_deadend",
    "eliminate_duplicate_initializer", "eliminate_identity", "eliminate_if_with_const_cond",
    "eliminate_nop_cast", "eliminate_nop_concat", "eliminate_nop_dropout", "eliminate_nop_expand",
    "eliminate_nop_flatten", "eliminate_nop_monotone_argmax", "eliminate_nop_pad", "eliminate_nop_reshape",
    "eliminate_nop_split", "eliminate_nop_transpose", "eliminate_nop_with_unit", "eliminate_shape_gather",
    "eliminate_shape_op", "eliminate_slice_after_shape", "eliminate_unused_initializer",
    "extract_constant_to_initializer", "fuse_add_bias_into_conv", "fuse_bn_into_conv", "fuse_concat_into_reshape",
    "fuse_consecutive_concats", "fuse_consecutive_log_softmax", "fuse_consecutive_reduce_unsqueeze",
    "fuse_consecutive_slices", "fuse_consecutive_squeezes", "fuse_consecutive_transposes",
    "fuse_consecutive_unsqueezes", "fuse_matmul_add_bias_into_gemm", "fuse_pad_into_conv", "fuse_pad_into_pool",
    "fuse_qkv", "fuse_transpose_into_gemm", "rewrite_where",
}


def _rule(name: str, kind: str) -> Rule:
    return Rule(name, Op("Relu", Var("x")), lambda m, ctx: None, kind=kind)


def _count(pctx) -> int:
    return 0


# -- the schedule ----------------------------------------------------------------------------------


def test_the_default_schedule_is_pinned():
    specs = ordered_specs(default_pass_names())
    assert {phase: [s.name for s in specs if s.phase == phase] for phase in PHASES} == DEFAULT_SCHEDULE
    assert [s.phase for s in specs] == sorted((s.phase for s in specs), key=PHASES.index)


def identity_conv_model():
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Identity", ["x"], ["i"], name="id"),
        helper.make_node("Conv", ["i", "W"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    inits = [tensor("W", rng.normal(0, 0.3, (2, 2, 1, 1)).astype(np.float32)),
             tensor("unused", np.ones(3, np.float32))]
    return make_model(nodes, [value_info("x", shape=[1, 2, 3, 3])], [value_info("y", shape=[1, 2, 3, 3])], inits)


def test_a_round_runs_rules_then_graph_then_cleanup_each_by_its_order(monkeypatch):
    """A graph pass of order 0 runs after every rule (the Identity is gone when it looks), and a
    cleanup pass of order 0 after every graph pass of higher order: phase first, then order."""
    registry._load_pass_modules()
    seen = {}

    def first_graph_pass(pctx) -> int:
        seen.setdefault("ops", [n.op_type for n in pctx.model.graph])
        return 0

    monkeypatch.setitem(registry._REGISTRY, "planted_graph_0", PassSpec(
        "planted_graph_0", "test only", run=first_graph_pass, kind=EXACT, phase=GRAPH, order=0, default=False))
    monkeypatch.setitem(registry._REGISTRY, "planted_cleanup_0", PassSpec(
        "planted_cleanup_0", "test only", run=_count, kind=EXACT, phase=CLEANUP, order=0, default=False))
    model = io.proto_to_ir(identity_conv_model())
    events = []
    run_passes(model, default_pass_names() + ["planted_cleanup_0", "planted_graph_0"],
               budget=ConstantBudget(io.tensor_bytes(model)),
               on_event=lambda kind, **info: events.append(info) if kind == "pass" else None)
    first_round = [e["name"] for e in events if e["round"] == 1]
    assert first_round == (["rules", "planted_graph_0"] + DEFAULT_SCHEDULE[GRAPH] + ["planted_cleanup_0"]
                           + DEFAULT_SCHEDULE[CLEANUP])
    assert events[0]["passes"] == DEFAULT_SCHEDULE[RULES]
    assert seen["ops"] == ["Conv", "Relu"]  # the rules phase already removed the Identity
    assert "unused" not in model.graph.initializers


def test_equal_orders_run_in_the_order_asked():
    names = ["eliminate_shape_op", "fold_shapes", "eliminate_slice_after_shape"]
    assert [s.name for s in ordered_specs(names)] == names
    assert [s.name for s in ordered_specs(names[::-1])] == names[::-1]


def test_default_list_keeps_its_order_by_order_then_name():
    # Reports print it and per-pass campaigns rotate through it by case index.
    names = default_pass_names()
    assert names == [s.name for s in sorted((get_pass(n) for n in names), key=lambda s: (s.order, s.name))]
    assert sorted(names) == sorted(n for names in DEFAULT_SCHEDULE.values() for n in names)


# -- the declaration -------------------------------------------------------------------------------


def test_a_rule_pass_class_is_derived_from_its_rules():
    exact = PassSpec("p", "s", rules=(_rule("a", EXACT), _rule("b", EXACT)))
    mixed = PassSpec("p", "s", rules=(_rule("a", EXACT), _rule("b", REASSOCIATING)))
    assert (exact.kind, exact.phase) == (EXACT, RULES)
    assert (mixed.kind, mixed.phase) == (REASSOCIATING, RULES)
    with pytest.raises(ValueError, match="derived from its rules"):
        PassSpec("p", "s", rules=(_rule("a", EXACT),), kind=EXACT)
    with pytest.raises(ValueError, match="rules run in phase"):
        PassSpec("p", "s", rules=(_rule("a", EXACT),), phase=CLEANUP)


@pytest.mark.parametrize("options,message", [
    (dict(phase=GRAPH), "declares its class"),
    (dict(kind="bitwise", phase=GRAPH), "declares its class"),
    (dict(kind=EXACT), "declares its phase"),
    (dict(kind=EXACT, phase=RULES), "declares its phase"),
    (dict(kind=EXACT, phase=GRAPH, fuzz="identity", not_fuzzed="why"), "not both"),
])
def test_a_graph_pass_declares_class_and_phase(options, message):
    with pytest.raises(ValueError, match=message):
        PassSpec("p", "s", run=_count, **options)


def test_rules_or_run_not_both():
    with pytest.raises(ValueError, match="not both or neither"):
        PassSpec("p", "s")
    with pytest.raises(ValueError, match="not both or neither"):
        PassSpec("p", "s", rules=(_rule("a", EXACT),), run=_count)


def test_every_declared_pass_is_registered_and_real_passes_are_consistent():
    declared = declared_passes()
    assert [s.name for s in all_passes()] == [s.name for s in sorted(declared, key=lambda s: (s.schedule_key, s.name))]
    for spec in declared:
        assert get_pass(spec.name) is spec
        if spec.rules:
            assert spec.kind == (REASSOCIATING if any(r.kind == REASSOCIATING for r in spec.rules) else EXACT)
    with pytest.raises(BadInputError, match="unknown pass 'no_such_pass'"):
        get_pass("no_such_pass")


def test_every_module_that_declares_passes_is_read():
    """A new pass module (fusion split in two, say) must be in PASS_MODULES or its passes vanish."""
    for info in pkgutil.iter_modules(onnxrefine.passes.__path__):
        module = importlib.import_module(f"onnxrefine.passes.{info.name}")
        if hasattr(module, "PASSES"):
            assert module in onnxrefine.passes.PASS_MODULES, info.name


def test_the_registry_refuses_a_pass_declared_twice_or_undecided_about_fuzzing(monkeypatch):
    fuzzed = PassSpec("twice", "s", run=_count, kind=EXACT, phase=GRAPH, fuzz="identity")
    monkeypatch.setattr(registry, "PASS_MODULES", (SimpleNamespace(PASSES=(fuzzed,)), SimpleNamespace(PASSES=(fuzzed,))))
    with pytest.raises(ValueError, match="declared twice"):
        declared_passes()
    undecided = PassSpec("undecided", "s", run=_count, kind=EXACT, phase=GRAPH)
    monkeypatch.setattr(registry, "PASS_MODULES", (SimpleNamespace(PASSES=(undecided,)),))
    with pytest.raises(ValueError, match="fuzz pattern or say why"):
        declared_passes()


# -- the readers -----------------------------------------------------------------------------------


def test_fuzz_targets_are_read_from_the_declarations():
    for spec in all_passes():
        assert (spec.fuzz is None) == bool(spec.not_fuzzed), spec.name
        if spec.fuzz is not None:
            assert TARGET_PATTERNS[spec.name] is PATTERNS[spec.fuzz]
    used = [s.fuzz for s in all_passes() if s.fuzz is not None]
    assert sorted(used) == sorted(PATTERNS)  # every pattern fuzzes exactly one pass
    assert set(TARGET_PATTERNS) == FUZZED


def test_pass_list_reads_the_declarations():
    rows = [line.split(" | ") for line in passes_markdown().splitlines()[2:]]
    assert [row[0].strip("|` ") for row in rows] == [s.name for s in all_passes()]
    for row, spec in zip(rows, all_passes()):
        assert row[1:5] == [f"{spec.phase} {spec.order}", spec.kind, "yes" if spec.default else "no",
                            f"`{spec.fuzz}`" if spec.fuzz else "none"]



def test_every_rule_name_stands_for_its_pass():
    """The summary prints rule names; each works wherever a pass name does."""
    from onnxrefine.passes.registry import pass_of_rule

    for spec in all_passes():
        for rule in spec.rules:
            assert get_pass(rule.name) is spec and pass_of_rule(rule.name) == spec.name
    assert pass_of_rule("no_such_rule") is None


def test_disable_by_rule_name_leaves_out_its_pass_and_says_what_else_goes(example, capsys):
    from onnxrefine.api import resolve_passes
    from onnxrefine.cli.main import main

    assert "fuse_bn_into_conv" not in resolve_passes(None, disable=["conv_bn"])
    assert "fuse_bn_into_conv" in resolve_passes(["conv_bn"])
    capsys.readouterr()  # what those two calls logged (where an earlier CLI run set up the handler)
    out = example.with_name("out.onnx")
    assert main(["optimize", str(example), str(out), "--disable", "conv_bn", "--no-verify"]) == 0
    captured = capsys.readouterr()
    assert "conv_bn " not in captured.out.split("rule")[-1].split("nodes")[0]  # no Conv+BN rewrite ran
    warning = [line for line in captured.err.splitlines() if "conv_bn is a rule" in line]
    assert warning == ["onnxrefine: warning: conv_bn is a rule of pass fuse_bn_into_conv, which is chosen "
                       "(or left out) whole: its other rules are conv_transpose_bn, conv_add_bn"]
    # A rule that is its pass's only one (and shares its name): nothing to say.
    assert main(["optimize", str(example), str(out), "--disable", "eliminate_identity", "--no-verify"]) == 0
    assert "is a rule of" not in capsys.readouterr().err
