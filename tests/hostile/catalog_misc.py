"""Cases: names (invalid UTF-8, markup, control characters), graph defects, output-path misuse,
inputs files that do not match the model, unusual valid models, and the resource bombs."""

from __future__ import annotations

import os
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hostile_cases import (OK, REFUSED, Case, Paths, base_graph, bundle_meta, w_external,
                           write_model)

LOAD_COMMANDS = ("optimize", "verify", "bisect", "reduce")
RUN_COMMANDS = ("optimize", "verify", "bisect")


def _model(make):
    def build(paths: Paths) -> None:
        paths.folder.mkdir(parents=True, exist_ok=True)
        bundle_meta(paths)
        write_model(paths, make())
    return build


# --- names ------------------------------------------------------------------------------------

def _bad_utf8(where: str):
    """A string field holding invalid UTF-8 (protobuf's Python API refuses to set one: a same-length
    placeholder is replaced in the serialized bytes)."""
    placeholder = "QQQQQQQQ"

    def make():
        model = base_graph()
        if where == "node_name":
            model.graph.node[0].name = placeholder
        elif where == "doc_string":
            model.graph.doc_string = placeholder
        elif where == "graph_name":
            model.graph.name = placeholder
        elif where == "producer":
            model.producer_name = placeholder
        elif where == "metadata":
            model.metadata_props.add(key="k", value=placeholder)
        elif where == "op_type":
            model.graph.node[2].op_type = placeholder
        elif where == "initializer_name":
            model.graph.initializer[1].name = placeholder
            model.graph.node[1].input[1] = placeholder
        data = model.SerializeToString()
        assert data.count(placeholder.encode()) >= 1
        return data.replace(placeholder.encode(), b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x28")
    return make


def _renamed(**names):
    """The base model with some names replaced (node names, tensors)."""

    def make():
        model = base_graph()
        for index, node in enumerate(model.graph.node):
            node.name = f"{names['node']}{index}" if "node" in names else node.name
        if "tensor" in names:  # the Identity's output: an intermediate value
            old, new = "id", names["tensor"]
            model.graph.node[2].output[0] = new
            model.graph.node[3].input[0] = new
        if "output" in names:
            model.graph.node[3].output[0] = names["output"]
            model.graph.output[0].name = names["output"]
        if "input" in names:
            model.graph.input[0].name = names["input"]
            model.graph.node[0].input[0] = names["input"]
        if "initializer" in names:
            model.graph.initializer[0].name = names["initializer"]
            model.graph.node[0].input[1] = names["initializer"]
        return model
    return make


def _undefined_input(name: str):
    def make():
        model = base_graph()
        model.graph.node[1].input[1] = name
        return model
    return make


# --- graph defects ----------------------------------------------------------------------------

def _two_writers():
    model = base_graph()
    model.graph.node.insert(3, helper.make_node("Neg", ["add"], ["id"], name="second_writer"))
    return model


def _writes_input():
    model = base_graph()
    model.graph.node[2].output[0] = "X"
    model.graph.node[3].input[0] = "X"
    return model


def _writes_initializer():
    model = base_graph()
    model.graph.node[2].output[0] = "B"
    model.graph.node[3].input[0] = "B"
    return model


def _cycle():
    model = base_graph()
    model.graph.node[0].input[0] = "Y"
    return model


def _self_loop():
    model = base_graph()
    model.graph.node[2].input[0] = "id"
    return model


def _output_undefined():
    model = base_graph()
    model.graph.output[0].name = "nothing"
    return model


def _no_graph():
    model = onnx.ModelProto()
    model.ir_version = 8
    model.opset_import.add(domain="", version=17)
    return model


def _input_dims(*dims, input_type=TensorProto.FLOAT):
    def make():
        model = base_graph()
        shape = model.graph.input[0].type.tensor_type.shape
        shape.ClearField("dim")
        for dim in dims:
            entry = shape.dim.add()
            if isinstance(dim, str):
                entry.dim_param = dim
            else:
                entry.dim_value = dim
        return model
    return make


def _opset(version: int):
    def make():
        model = base_graph()
        model.opset_import[0].version = version
        return model
    return make


def _unknown_op():
    model = base_graph()
    model.graph.node[2].op_type = "NoSuchOp"
    return model


def _no_opset():
    model = base_graph()
    del model.opset_import[:]
    return model


def _string_model(where: str):
    """Valid models with string tensors (string initializer, Constant, graph input)."""

    def make():
        words = np.array([b"alpha", b"beta", b"", "\u00e9t\u00e9".encode()], dtype=object)
        if where == "input":
            nodes = [helper.make_node("Identity", ["S"], ["T"], name="id1"),
                     helper.make_node("Identity", ["T"], ["U"], name="id2")]
            inputs = [helper.make_tensor_value_info("S", TensorProto.STRING, [4])]
            inits = []
        else:
            nodes = [helper.make_node("Identity", ["K"], ["T"], name="id1"),
                     helper.make_node("Identity", ["T"], ["U"], name="id2")]
            inputs = []
            tensor = helper.make_tensor("K", TensorProto.STRING, [4], list(words))
            if where == "constant":
                nodes.insert(0, helper.make_node("Constant", [], ["K"], value=tensor, name="k"))
                inits = []
            else:
                inits = [tensor]
        graph = helper.make_graph(nodes, "strings", inputs,
                                  [helper.make_tensor_value_info("U", TensorProto.STRING, [4])], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model
    return make


# --- output paths -----------------------------------------------------------------------------

def _cli(argv_of, prepare=None, commands=("optimize",)):
    """A valid model; `argv_of(command, paths)` is the misuse."""

    def build(paths: Paths) -> None:
        _model(base_graph)(paths)
        paths.out.mkdir(exist_ok=True)
        if prepare is not None:
            prepare(paths)
    return build, argv_of, commands


def _opt(*extra):
    return lambda command, p: ["optimize", str(p.model), *[a(p) if callable(a) else a for a in extra]]


def _cli_case(name, argv_of, message, prepare=None, commands=("optimize",), expect=REFUSED):
    build, argv, commands = _cli(argv_of, prepare, commands)
    return Case(name, "cli", build, expect=expect, message=message, commands=commands, argv=argv)


# --- inputs files -----------------------------------------------------------------------------

def _two_input_model():
    nodes = [helper.make_node("Add", ["X", "Z"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["Y"], name="relu")]
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4]),
                       helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _inputs_case(name, arrays, message, expect=REFUSED, raw: bytes | None = None, suffix=".npz"):
    def build(paths: Paths) -> None:
        _model(_two_input_model)(paths)
        target = paths.folder / f"inputs{suffix}"
        if raw is not None:
            target.write_bytes(raw)
        else:
            np.savez(target, **arrays)

    def argv(command, paths):
        inputs = str(paths.folder / f"inputs{suffix}")
        if command == "optimize":
            return ["optimize", str(paths.model), "-o", str(paths.out / "m.onnx"), "--inputs", inputs]
        if command == "verify":
            return ["verify", str(paths.model), str(paths.model), "--inputs", inputs, "--no-localize"]
        return ["bisect", str(paths.model), "--out", str(paths.out / "b"), "--inputs", inputs, "--trials", "1"]
    return Case(name, "inputs", build, expect=expect, message=message, commands=RUN_COMMANDS, argv=argv)


def _zip_bomb(paths: Paths) -> bytes:
    """An .npz whose member claims 4 GiB of zeros (compresses to ~4 MB)."""
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        header = np.lib.format.header_data_from_array_1_0(np.zeros((1, 4), np.float32))
        header["shape"] = (1 << 28, 4)
        with archive.open("X.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, header)
            chunk = bytes(1 << 20)
            for _ in range(4096):
                member.write(chunk)
    return buffer.getvalue()


# --- resource bombs (the memory budget's cases) -----------------------------------------------

def _bomb(kind: str):
    def make():
        if kind == "constant_of_shape":
            shape = numpy_helper.from_array(np.array([1 << 16, 1 << 16], np.int64), "shape")
            nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"], name="bomb"),
                     helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0, name="sum"),
                     helper.make_node("Add", ["X", "s"], ["Y"], name="add")]
            inits = [shape]
        else:  # a Loop of 10^9 iterations
            body = helper.make_graph(
                [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                 helper.make_node("Add", ["acc_in", "one"], ["acc_out"])], "body",
                [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1, 4])],
                [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1, 4])])
            inits = [numpy_helper.from_array(np.array(10**9, np.int64), "trips"),
                     numpy_helper.from_array(np.array(True), "go"),
                     numpy_helper.from_array(np.ones((1, 4), np.float32), "one")]
            nodes = [helper.make_node("Loop", ["trips", "go", "X"], ["Y"], body=body, name="loop")]
        graph = helper.make_graph(nodes, "bomb", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model
    return make


def cases() -> list[Case]:
    out = []
    for where in ("node_name", "doc_string", "graph_name", "producer", "metadata", "op_type",
                  "initializer_name"):
        out.append(Case(f"utf8_invalid_{where}", "names", _model(_bad_utf8(where)), message=r"UTF-8|utf8|utf-8"))
    markup = {"node": "[/]", "tensor": "[/]", "output": "[bold red]out[/]", "input": "[link=x]in[/link]",
              "initializer": "[/]W"}
    for key, name in markup.items():
        out.append(Case(f"markup_{key}_name", "names", _model(_renamed(**{key: name})), expect=OK,
                        commands=RUN_COMMANDS))
    out += [
        Case("markup_all_names", "names", _model(_renamed(node="[/]", tensor="[i]", output="[/]y",
                                                          input="[/x]", initializer="[b]")),
             expect=OK, commands=RUN_COMMANDS),
        Case("newline_in_names", "names", _model(_renamed(node="a\nb", tensor="t\nu", output="o\r\nut")),
             expect=OK, commands=RUN_COMMANDS),
        Case("ansi_escape_in_names", "names", _model(_renamed(node="\x1b[2J\x1b[31mred", tensor="\x1b]0;x\x07")),
             expect=OK, commands=RUN_COMMANDS),
        Case("long_names", "names", _model(_renamed(node="n" * 20000, tensor="t" * 20000)), expect=OK,
             commands=("optimize",)),
        Case("markup_in_error_message", "names", _model(_undefined_input("[/][bold]missing")),
             message=r"\[/\]\[bold\]missing.*never defined"),
        Case("newline_in_error_message", "names", _model(_undefined_input("evil\nsecond line")),
             message=r"evil.*second line.*never defined"),
        # graph structure
        Case("tensor_written_twice", "graph", _model(_two_writers), message=r"'id'.*(written|produced|more than one)"),
        Case("node_writes_graph_input", "graph", _model(_writes_input), message=r"'X'.*(written|produced|input)"),
        Case("node_writes_initializer", "graph", _model(_writes_initializer),
             message=r"'B'.*(written|produced|initializer)"),
        Case("cycle", "graph", _model(_cycle), message=r"cycle"),
        Case("self_loop", "graph", _model(_self_loop), message=r"cycle|never defined"),
        Case("undefined_input", "graph", _model(_undefined_input("ghost")), message=r"ghost.*never defined"),
        Case("undefined_output", "graph", _model(_output_undefined), message=r"nothing.*never defined"),
        Case("no_graph", "graph", _model(_no_graph), message=r"no graph|empty graph|not an ONNX"),
        Case("input_dim_2_40", "graph", _model(_input_dims(1, 2**40)), message=r"'X'.*(too large|elements|bytes)",
             commands=RUN_COMMANDS, expect=(0, 2)),
        Case("input_dims_product_huge", "graph", _model(_input_dims(2**20, 2**20, 4)),
             message=r"'X'.*(too large|elements|bytes)",
             commands=RUN_COMMANDS, expect=(0, 2)),
        Case("input_dim_negative", "graph", _model(_input_dims(1, -4)), message=r"'X'.*(negative|dim)",
             commands=RUN_COMMANDS),
        Case("input_rank_wrong", "graph", _model(_input_dims(1, 4, 1)), expect=(0, 2),
             message=r".", commands=RUN_COMMANDS),
        Case("opset_999", "graph", _model(_opset(999)), expect=(0, 2), message=r"opset|version",
             commands=RUN_COMMANDS),
        Case("unknown_op", "graph", _model(_unknown_op), expect=(0, 2), message=r"NoSuchOp",
             commands=RUN_COMMANDS),
        Case("no_opset_import", "graph", _model(_no_opset), expect=(0, 2), message=r"opset",
             commands=RUN_COMMANDS),
        # valid models that must work
        Case("string_initializer", "valid", _model(_string_model("initializer")), expect=OK,
             commands=("optimize",)),
        Case("string_constant", "valid", _model(_string_model("constant")), expect=OK, commands=("optimize",)),
        Case("string_input", "valid", _model(_string_model("input")), expect=OK, commands=("optimize",)),
        Case("symbolic_input_ok", "valid", _model(_input_dims("N", 4)), expect=OK, commands=RUN_COMMANDS),
        Case("external_data_ok_all", "valid",
             lambda p: (bundle_meta(p), write_model(p, w_external(p))), expect=OK, commands=RUN_COMMANDS),
    ]
    # output paths
    out += [
        _cli_case("o_is_directory", _opt("-o", lambda p: str(p.out)), r"is a folder"),
        _cli_case("o_is_input", _opt("-o", lambda p: str(p.model)), r"overwrite the input"),
        _cli_case("o_symlink_to_input", _opt("-o", lambda p: str(p.out / "link.onnx")), r"overwrite the input",
                  prepare=lambda p: os.symlink(p.model, p.out / "link.onnx")),
        _cli_case("o_hardlink_to_input", _opt("-o", lambda p: str(p.out / "hard.onnx")), r"overwrite the input",
                  prepare=lambda p: os.link(p.model, p.out / "hard.onnx")),
        _cli_case("o_relative_to_input", _opt("-o", lambda p: str(p.out / ".." / "model" / "model.onnx")),
                  r"overwrite the input"),
        _cli_case("o_missing_folder", _opt("-o", lambda p: str(p.out / "nope" / "m.onnx")), r"does not exist"),
        _cli_case("o_is_fifo", _opt("-o", lambda p: str(p.out / "fifo")), r"not a regular file",
                  prepare=lambda p: os.mkfifo(p.out / "fifo")),
        _cli_case("o_parent_is_file", _opt("-o", lambda p: str(p.model / "m.onnx")), r"not a folder|does not exist"),
        _cli_case("o_input_external_data", _opt("-o", lambda p: str(p.folder / "weights.bin")),
                  r"external data|overwrite the input",
                  prepare=lambda p: write_model(p, w_external(p))),
        _cli_case("report_is_output", _opt("-o", lambda p: str(p.out / "m.onnx"), "--report",
                                           lambda p: str(p.out / "m.onnx")), r"same file"),
        _cli_case("report_is_directory", _opt("-o", lambda p: str(p.out / "m.onnx"), "--report",
                                              lambda p: str(p.out)), r"is a folder"),
        _cli_case("report_is_input", _opt("-o", lambda p: str(p.out / "m.onnx"), "--report",
                                          lambda p: str(p.model)), r"overwrite the input"),
        _cli_case("inputs_missing", _opt("-o", lambda p: str(p.out / "m.onnx"), "--inputs",
                                         lambda p: str(p.out / "none.npz")), r"no such file"),
        _cli_case("inputs_is_dir", _opt("-o", lambda p: str(p.out / "m.onnx"), "--inputs",
                                        lambda p: str(p.out)), r"not a regular file"),
        _cli_case("dims_malformed", _opt("-o", lambda p: str(p.out / "m.onnx"), "--dims", "N=two"), r"dims"),
        _cli_case("verify_json_is_candidate",
                  lambda c, p: ["verify", str(p.model), str(p.out / "c.onnx"), "--json", str(p.out / "c.onnx")],
                  r"overwrite the input", commands=("verify",),
                  prepare=lambda p: write_model(Paths(p.root), base_graph(), "../out/c.onnx")),
        _cli_case("verify_html_is_dir", lambda c, p: ["verify", str(p.model), str(p.model), "--html", str(p.out)],
                  r"is a folder", commands=("verify",)),
        _cli_case("bisect_out_exists", lambda c, p: ["bisect", str(p.model), "--out", str(p.out)],
                  r"already exists", commands=("bisect",)),
        _cli_case("bisect_out_is_file", lambda c, p: ["bisect", str(p.model), "--out", str(p.model)],
                  r"already exists", commands=("bisect",)),
        _cli_case("reduce_not_a_bundle", lambda c, p: ["reduce", str(p.out)], r"not a fuzz bundle",
                  commands=("reduce",)),
    ]
    if os.geteuid() != 0:  # root writes into a read-only folder anyway
        out.append(_cli_case("o_read_only_folder", _opt("-o", lambda p: str(p.out / "ro" / "m.onnx")),
                             r"not writable", prepare=lambda p: ((p.out / "ro").mkdir(), os.chmod(p.out / "ro", 0o555))))
    # inputs files against the model (X[N,4], Z[N,4])
    good = np.ones((2, 4), np.float32)
    out += [
        _inputs_case("inputs_ok", {"X": good, "Z": good}, "", expect=OK),
        _inputs_case("inputs_wrong_dtype", {"X": good.astype(np.float64), "Z": good}, r"'X'.*float64.*float32"),
        _inputs_case("inputs_int_dtype", {"X": good.astype(np.int32), "Z": good}, r"'X'.*int32"),
        _inputs_case("inputs_wrong_shape", {"X": np.ones((2, 5), np.float32), "Z": good}, r"'X'.*shape"),
        _inputs_case("inputs_wrong_rank", {"X": np.ones((2, 4, 1), np.float32), "Z": good}, r"'X'.*rank"),
        _inputs_case("inputs_scalar", {"X": np.float32(1), "Z": good}, r"'X'.*rank"),
        _inputs_case("inputs_missing_input", {"X": good}, r"missing.*Z"),
        _inputs_case("inputs_extra_input", {"X": good, "Z": good, "W": good}, r"W"),
        _inputs_case("inputs_symbolic_inconsistent", {"X": good, "Z": np.ones((3, 4), np.float32)},
                     r"'Z'.*N"),
        _inputs_case("inputs_multi_set_one_bad", {"0/X": good, "0/Z": good, "1/X": good,
                                                  "1/Z": np.ones((3, 4), np.float32)}, r"set 1.*'Z'"),
        _inputs_case("inputs_multi_set_missing", {"0/X": good, "0/Z": good, "1/X": good}, r"set 1.*missing.*Z"),
        _inputs_case("inputs_symbolic_other_value", {"X": np.ones((5, 4), np.float32),
                                                     "Z": np.ones((5, 4), np.float32)}, "", expect=OK),
        _inputs_case("inputs_object_array", {"X": np.array([[object()]], dtype=object), "Z": good},
                     r"unpickl|object"),
        _inputs_case("inputs_corrupt_npz", {}, r"cannot read|inputs", raw=b"PK\x03\x04garbage"),
        _inputs_case("inputs_empty_npz", {}, r"no input|missing|empty"),
        _inputs_case("inputs_pickle_untrusted", {}, r"unpickle", raw=b"\x80\x04N.", suffix=".pkl"),
        _inputs_case("inputs_text_file", {}, r"cannot read|inputs", raw=b"X = [1, 2, 3]\n"),
        Case("inputs_zip_bomb", "bombs", lambda p: (_model(_two_input_model)(p),
                                                    (p.folder / "inputs.npz").write_bytes(_zip_bomb(p))),
             message=r"inputs|large|budget", commands=("optimize",), requires="onnxrefine.resources",
             argv=lambda c, p: ["optimize", str(p.model), "-o", str(p.out / "m.onnx"), "--inputs",
                                str(p.folder / "inputs.npz")],
             slow=True),  # building it deflates 4 GiB: ~40 s, more than the rest of the suite
        Case("bomb_constant_of_shape", "bombs", _model(_bomb("constant_of_shape")), expect=(0, 2),
             message=r"memory|budget", commands=("optimize", "verify"), requires="onnxrefine.resources"),
        Case("bomb_loop_1e9", "bombs", _model(_bomb("loop")), expect=(0, 2),
             message=r"Loop|trip|time|budget", commands=("optimize", "verify"), requires="onnxrefine.resources"),
    ]
    return out
