"""Cases: external-data tricks and tensors whose bytes do not match their dtype and dims."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hostile_cases import (B, OK, REFUSED, W, Case, Paths, base_graph, bundle_meta, external,
                           w_external, write_model)

OUTSIDE = r"outside the model's folder"
RUNS = ("optimize", "verify", "bisect")  # reduce answers 2 for a bundle that does not mismatch


def _ext(location=None, offset=None, length=None, data=None, write=True, prepare=None,
         location_of=None):
    """The base model with W external; `location_of(paths)` computes a location from the paths,
    `prepare(paths)` makes the files it names."""

    def build(paths: Paths) -> None:
        paths.folder.mkdir(parents=True, exist_ok=True)
        bundle_meta(paths)
        if prepare is not None:
            prepare(paths)
        where = location_of(paths) if location_of else location
        model = w_external(paths, where, offset, length, data, write=write)
        write_model(paths, model)
    return build


def _two_in_one_file(paths: Paths) -> None:
    """W and B in one data file at offsets (valid: both read from the one checked file)."""
    paths.folder.mkdir(parents=True, exist_ok=True)
    bundle_meta(paths)
    (paths.folder / "weights.bin").write_bytes(W.tobytes() + bytes(64) + B.tobytes())
    model = base_graph(w_tensor=external(numpy_helper.from_array(W, "W"), "weights.bin", 0, 64))
    model.graph.initializer[1].CopyFrom(external(numpy_helper.from_array(B, "B"), "weights.bin", 128, 16))
    write_model(paths, model)


def _link_out(paths: Paths) -> None:
    os.symlink(paths.canary, paths.folder / "weights.bin")


def _link_out_dir(paths: Paths) -> None:
    os.symlink(paths.root, paths.folder / "up")


def _fifo_inside(paths: Paths) -> None:
    os.mkfifo(paths.folder / "weights.bin")


def _dir_inside(paths: Paths) -> None:
    (paths.folder / "weights.bin").mkdir()


def _link_dev_zero(paths: Paths) -> None:
    os.symlink("/dev/zero", paths.folder / "weights.bin")


def _with_tensor_in(where: str, tensor: TensorProto):
    """A model whose hostile tensor sits in a subgraph, a function, a Constant, a sparse initializer."""

    def build(paths: Paths) -> None:
        paths.folder.mkdir(parents=True, exist_ok=True)
        bundle_meta(paths)
        model = base_graph()
        if where == "constant":
            model.graph.node.insert(0, helper.make_node("Constant", [], ["C"], value=tensor, name="const"))
            model.graph.node.append(helper.make_node("Add", ["Y", "C"], ["Z"], name="addc"))
            model.graph.output[0].name = "Z"
        elif where == "subgraph":
            branch = helper.make_graph(
                [helper.make_node("Identity", [tensor.name], ["b_out"])], "then", [],
                [helper.make_tensor_value_info("b_out", TensorProto.FLOAT, None)], [tensor])
            other = helper.make_graph(
                [helper.make_node("Identity", ["Y"], ["e_out"])], "else", [],
                [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, None)])
            model.graph.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
            model.graph.node.append(helper.make_node("If", ["cond"], ["Z"], then_branch=branch,
                                                     else_branch=other, name="if"))
            model.graph.output[0].name = "Z"
        elif where == "function":
            body = [helper.make_node("Constant", [], ["k"], value=tensor),
                    helper.make_node("Add", ["a", "k"], ["r"])]
            function = helper.make_function("local", "AddK", ["a"], ["r"], body,
                                            [helper.make_opsetid("", 17)])
            model.functions.append(function)
            model.opset_import.append(helper.make_opsetid("local", 1))
            model.graph.node.append(helper.make_node("AddK", ["Y"], ["Z"], domain="local", name="addk"))
            model.graph.output[0].name = "Z"
        elif where in ("sparse_values", "sparse_indices"):
            values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "S")
            indices = numpy_helper.from_array(np.array([0, 3], np.int64), "S_idx")
            if where == "sparse_values":
                values = tensor
            else:
                indices = tensor
            sparse = helper.make_sparse_tensor(values, indices, [4])
            model.graph.sparse_initializer.append(sparse)
            model.graph.node.append(helper.make_node("Add", ["Y", values.name], ["Z"], name="adds"))
            model.graph.output[0].name = "Z"
        elif where == "initializer":
            model.graph.initializer.append(tensor)
            model.graph.node.append(helper.make_node("Add", ["Y", tensor.name], ["Z"], name="addt"))
            model.graph.output[0].name = "Z"
        write_model(paths, model)
    return build


def _ext_tensor(location: str, name="T", values=(1.0, 2.0, 3.0, 4.0), dtype=np.float32):
    return external(numpy_helper.from_array(np.array(values, dtype), name), location)


def _raw(name: str, dtype: int, dims, raw: bytes) -> TensorProto:
    tensor = TensorProto()
    tensor.name, tensor.data_type = name, dtype
    tensor.dims.extend(dims)
    tensor.raw_data = raw
    return tensor


def _typed(name: str, dtype: int, dims, field: str, values) -> TensorProto:
    tensor = TensorProto()
    tensor.name, tensor.data_type = name, dtype
    tensor.dims.extend(dims)
    getattr(tensor, field).extend(values)
    return tensor


def _w_replaced(tensor: TensorProto):
    """The base model with W (4x4 float) replaced by `tensor`."""

    def build(paths: Paths) -> None:
        paths.folder.mkdir(parents=True, exist_ok=True)
        bundle_meta(paths)
        write_model(paths, base_graph(w_tensor=tensor))
    return build


def cases() -> list[Case]:
    raw = W.tobytes()
    out = [
        # locations
        Case("ext_ok", "extdata", _ext("weights.bin"), expect=OK, commands=RUNS),
        Case("ext_ok_offset_length", "extdata", _ext("weights.bin", 16, 64, data=bytes(16) + raw), expect=OK, commands=RUNS),
        Case("ext_subfolder_ok", "extdata", _ext("sub/w.bin", prepare=lambda p: (p.folder / "sub").mkdir()),
             expect=OK, commands=RUNS),
        Case("ext_dot_slash_location_ok", "extdata", _ext("./weights.bin"), expect=OK, commands=RUNS),
        Case("ext_dot_slash_location_ok_reduce", "extdata", _ext("./weights.bin"),
             message=r"does not give a mismatch", commands=("reduce",)),
        Case("ext_two_tensors_one_file_ok", "extdata", _two_in_one_file, expect=OK, commands=RUNS),
        Case("ext_traversal_relative", "extdata", _ext("../secret.bin", write=False), message=OUTSIDE),
        Case("ext_traversal_deep", "extdata", _ext("a/../../secret.bin", write=False), message=OUTSIDE),
        Case("ext_absolute", "extdata", _ext(write=False, location_of=lambda p: str(p.canary)), message=OUTSIDE),
        Case("ext_absolute_etc", "extdata", _ext("/etc/passwd", write=False), message=OUTSIDE),
        Case("ext_symlink_out", "extdata", _ext("weights.bin", write=False, prepare=_link_out), message=OUTSIDE),
        Case("ext_symlinked_dir_out", "extdata", _ext("up/secret.bin", write=False, prepare=_link_out_dir),
             message=OUTSIDE),
        Case("ext_dev_zero", "extdata", _ext("/dev/zero", write=False), message=OUTSIDE),
        Case("ext_link_dev_zero", "extdata", _ext("weights.bin", write=False, prepare=_link_dev_zero),
             message=OUTSIDE),
        Case("ext_fifo_inside", "extdata", _ext("weights.bin", write=False, prepare=_fifo_inside),
             message=r"not a regular file"),
        Case("ext_dir_inside", "extdata", _ext("weights.bin", write=False, prepare=_dir_inside),
             message=r"not a regular file"),
        Case("ext_missing_file", "extdata", _ext("absent.bin", write=False), message=r"missing|no such"),
        Case("ext_empty_location", "extdata", _ext("", write=False), message=r"without a location|location"),
        Case("ext_nul_in_location", "extdata", _ext("weights.bin\x00../../secret.bin", write=False),
             message=r"NUL|null|location"),
        Case("ext_model_folder_itself", "extdata", _ext(".", write=False), message=r"not a regular file"),
        Case("ext_backslash_traversal", "extdata", _ext("..\\secret.bin", write=False),
             message=r"missing|no such"),
        # offsets and lengths
        Case("ext_negative_offset", "extdata", _ext("weights.bin", -16), message=r"offset"),
        Case("ext_negative_length", "extdata", _ext("weights.bin", 0, -64), message=r"length"),
        Case("ext_offset_not_a_number", "extdata", _ext("weights.bin", "x16"), message=r"offset"),
        Case("ext_length_not_a_number", "extdata", _ext("weights.bin", 0, "64bytes"), message=r"length"),
        Case("ext_length_short", "extdata", _ext("weights.bin", 0, 32), message=r"length|bytes"),
        Case("ext_length_long", "extdata", _ext("weights.bin", 0, 68, data=raw + bytes(4)), message=r"length|bytes"),
        Case("ext_offset_past_end", "extdata", _ext("weights.bin", 4096), message=r"exceeds|bytes|offset"),
        Case("ext_range_past_end", "extdata", _ext("weights.bin", 16, 64), message=r"exceeds|bytes"),
        Case("ext_file_short_no_length", "extdata", _ext("weights.bin", data=raw[:40]), message=r"exceeds|bytes|short"),
        Case("ext_file_empty", "extdata", _ext("weights.bin", data=b""), message=r"exceeds|bytes|short"),
        Case("ext_huge_offset", "extdata", _ext("weights.bin", 2**62), message=r"exceeds|offset"),
        Case("ext_offset_overflow", "extdata", _ext("weights.bin", 2**70), message=r"exceeds|offset"),
        # where the external tensor sits
        Case("ext_traversal_in_subgraph", "extdata", _with_tensor_in("subgraph", _ext_tensor("../secret.bin")),
             message=OUTSIDE),
        Case("ext_traversal_in_function", "extdata", _with_tensor_in("function", _ext_tensor("../secret.bin")),
             message=OUTSIDE),
        Case("ext_traversal_in_constant", "extdata", _with_tensor_in("constant", _ext_tensor("../secret.bin")),
             message=OUTSIDE),
        Case("ext_traversal_sparse_values", "extdata",
             _with_tensor_in("sparse_values", _ext_tensor("../secret.bin", "S", (1.0, 2.0))), message=OUTSIDE),
        Case("ext_traversal_sparse_indices", "extdata",
             _with_tensor_in("sparse_indices", _ext_tensor("../secret.bin", "S_idx", (0, 3), np.int64)),
             message=OUTSIDE),
        Case("ext_absolute_in_subgraph", "extdata", _with_tensor_in("subgraph", _ext_tensor("/dev/zero")),
             message=OUTSIDE),
        Case("ext_string_tensor", "extdata",
             _with_tensor_in("initializer", external(helper.make_tensor("T", TensorProto.STRING, [1], [b"a"]),
                                                     "weights.bin")),
             message=r"string|STRING|missing"),
        # raw_data / typed data against dtype x dims
        Case("raw_short", "tensor", _w_replaced(_raw("W", TensorProto.FLOAT, [4, 4], raw[:60])),
             message=r"raw_data|bytes"),
        Case("raw_long", "tensor", _w_replaced(_raw("W", TensorProto.FLOAT, [4, 4], raw + b"\0" * 4)),
             message=r"raw_data|bytes"),
        Case("raw_empty_with_dims", "tensor", _w_replaced(_raw("W", TensorProto.FLOAT, [4, 4], b"")),
             message=r"raw_data|bytes|no data|values"),
        Case("raw_odd_bytes", "tensor", _w_replaced(_raw("W", TensorProto.FLOAT, [4, 4], raw[:63])),
             message=r"raw_data|bytes"),
        Case("float_data_short", "tensor", _w_replaced(_typed("W", TensorProto.FLOAT, [4, 4], "float_data", [1.0] * 15)),
             message=r"float_data|values"),
        Case("float_data_long", "tensor", _w_replaced(_typed("W", TensorProto.FLOAT, [4, 4], "float_data", [1.0] * 17)),
             message=r"float_data|values"),
        Case("dims_2_40_initializer", "tensor", _w_replaced(_raw("W", TensorProto.FLOAT, [2**20, 2**20], raw)),
             message=r"raw_data|bytes|too large|elements"),
        Case("dims_2_40_no_data", "tensor", _w_replaced(_raw("W", TensorProto.FLOAT, [4, 2**40], b"")),
             message=r"raw_data|bytes|too large|elements|values"),
        Case("dims_negative", "tensor", _w_replaced(_raw("W", TensorProto.FLOAT, [4, -4], raw)),
             message=r"negative|dim"),
        Case("dims_overflow_int64", "tensor", _w_replaced(_raw("W", TensorProto.FLOAT, [2**62, 2**62, 4], raw)),
             message=r"raw_data|bytes|too large|elements"),
        Case("dtype_undefined", "tensor", _w_replaced(_raw("W", 0, [4, 4], raw)), message=r"data type|dtype"),
        Case("dtype_unknown", "tensor", _w_replaced(_raw("W", 999, [4, 4], raw)), message=r"data type|dtype"),
        Case("raw_short_in_constant", "tensor",
             _with_tensor_in("constant", _raw("T", TensorProto.FLOAT, [4], raw[:12])), message=r"raw_data|bytes"),
        Case("raw_long_in_subgraph", "tensor",
             _with_tensor_in("subgraph", _raw("T", TensorProto.FLOAT, [4], raw[:20])), message=r"raw_data|bytes"),
        Case("raw_short_in_function", "tensor",
             _with_tensor_in("function", _raw("T", TensorProto.FLOAT, [4], raw[:8])), message=r"raw_data|bytes"),
        Case("raw_short_sparse_values", "tensor",
             _with_tensor_in("sparse_values", _raw("S", TensorProto.FLOAT, [2], raw[:4])), message=r"raw_data|bytes"),
        Case("sparse_index_out_of_range", "tensor",
             _with_tensor_in("sparse_indices", numpy_helper.from_array(np.array([0, 99], np.int64), "S_idx")),
             message=r"sparse|index|indices"),
        Case("sparse_negative_index", "tensor",
             _with_tensor_in("sparse_indices", numpy_helper.from_array(np.array([-1, 2], np.int64), "S_idx")),
             message=r"sparse|index|indices"),
        Case("int64_data_short", "tensor",
             _with_tensor_in("initializer", _typed("T", TensorProto.INT64, [4], "int64_data", [1, 2])),
             message=r"int64_data|values"),
        Case("bf16_raw_short", "tensor",
             _with_tensor_in("initializer", _raw("T", TensorProto.BFLOAT16, [4], b"\0" * 6)),
             message=r"raw_data|bytes"),
        Case("int4_raw_long", "tensor",
             _with_tensor_in("initializer", _raw("T", TensorProto.INT4, [4], b"\0" * 3)),
             message=r"raw_data|bytes"),
        Case("string_data_wrong_count", "tensor",
             _with_tensor_in("initializer", _typed("T", TensorProto.STRING, [3], "string_data", [b"a"])),
             message=r"string_data|values"),
    ]
    return out
