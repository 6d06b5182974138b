"""Engine performance: linear scaling on long chains, and a ResNet-50-sized model load-to-save.

    python bench/engine_scaling.py            # both tables
    python bench/engine_scaling.py --chain    # chain scaling only
    python bench/engine_scaling.py --resnet   # ResNet-50-shaped model only
    python bench/engine_scaling.py --decoder  # decoder-only transformer, 100 to 1600 layers (~130k nodes)
    python bench/engine_scaling.py --big-chain --big-sizes 62500,250000,1000000   # up to 1M nodes

--decoder and --big-chain (bench/_big_graphs.py) run the default pipeline without verification and
without per-rewrite certificates (`optimize --no-verify --no-certify`: the certificates run one
small onnxruntime session per rewrite, linear too, but they dominate at 100k rewrites); the table
gives seconds per 1000 nodes, which stays flat when optimize is linear, the peak RSS, the mapped
file pages at the end, and the rewrites the constant budget refused (a chain of more than ~524k nodes
outgrows its 1 MiB allowance: report.constant_budget).

Each measurement runs in a fresh subprocess so peak RSS (VmHWM) belongs to that step alone.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from rich.console import Console
from rich.table import Table


def chain_model(blocks: int, channels: int = 8) -> onnx.ModelProto:
    """`blocks` Conv -> Add(per-channel constant) -> BatchNormalization -> Relu blocks."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for i in range(blocks):
        arrays = {
            f"w{i}": rng.normal(0, 0.3, (channels, channels, 1, 1)),
            f"k{i}": rng.normal(0, 0.1, (channels, 1, 1)),
            f"s{i}": rng.uniform(0.5, 1.5, channels),
            f"b{i}": rng.normal(0, 0.1, channels),
            f"m{i}": rng.normal(0, 0.1, channels),
            f"v{i}": rng.uniform(0.5, 1.5, channels),
        }
        inits += [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()]
        nodes += [
            helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}"),
            helper.make_node("Add", [f"c{i}", f"k{i}"], [f"a{i}"], name=f"add{i}"),
            helper.make_node("BatchNormalization", [f"a{i}", f"s{i}", f"b{i}", f"m{i}", f"v{i}"], [f"n{i}"], name=f"bn{i}"),
            helper.make_node("Relu", [f"n{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        x = f"r{i}"
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, 4, 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def resnet50_model() -> onnx.ModelProto:
    """ResNet-50's layer shapes with BN after every conv and random weights (~100 MB)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    counter = [0]

    def name(prefix):
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def conv_bn(x, c_in, c_out, k, stride=1, relu=True):
        n = name("conv")
        inits.append(numpy_helper.from_array(
            rng.normal(0, (2.0 / (c_in * k * k)) ** 0.5, (c_out, c_in, k, k)).astype(np.float32), f"{n}_w"))
        for suffix, arr in (("s", rng.uniform(0.5, 1.5, c_out)), ("b", rng.normal(0, 0.1, c_out)),
                            ("m", rng.normal(0, 0.1, c_out)), ("v", rng.uniform(0.5, 1.5, c_out))):
            inits.append(numpy_helper.from_array(arr.astype(np.float32), f"{n}_{suffix}"))
        pad = k // 2
        nodes.append(helper.make_node("Conv", [x, f"{n}_w"], [f"{n}_c"], name=n, strides=[stride, stride],
                                      pads=[pad] * 4))
        nodes.append(helper.make_node("BatchNormalization", [f"{n}_c"] + [f"{n}_{s}" for s in "sbmv"],
                                      [f"{n}_bn"], name=f"{n}_bn"))
        if not relu:
            return f"{n}_bn"
        nodes.append(helper.make_node("Relu", [f"{n}_bn"], [f"{n}_r"], name=f"{n}_relu"))
        return f"{n}_r"

    x = conv_bn("image", 3, 64, 7, 2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, c_in = "pool0", 64
    for stage, (width, blocks) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 0 else 1
            y = conv_bn(x, c_in, width, 1)
            y = conv_bn(y, width, width, 3, stride)
            y = conv_bn(y, width, width * 4, 1, relu=False)
            shortcut = conv_bn(x, c_in, width * 4, 1, stride, relu=False) if block == 0 else x
            out = name("add")
            nodes.append(helper.make_node("Add", [y, shortcut], [out]))
            nodes.append(helper.make_node("Relu", [out], [out + "_r"]))
            x, c_in = out + "_r", width * 4
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"]))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"]))
    inits.append(numpy_helper.from_array(rng.normal(0, 0.02, (1000, 2048)).astype(np.float32), "fc_w"))
    inits.append(numpy_helper.from_array(np.zeros(1000, np.float32), "fc_b"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1))
    graph = helper.make_graph(
        nodes, "resnet50_shaped", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])], inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# --- measured steps, each in its own process --------------------------------------------------

def _step(kind: str, source: str, target: str, passes: str | None) -> dict:
    """Load, (optimize,) save; imports happen before the clock starts, and are timed apart."""
    import_started = time.perf_counter()
    from onnxrefine.api import optimize_ir
    from onnxrefine.ir import io

    import_seconds = time.perf_counter() - import_started if kind != "onnx" else 0.0
    started = time.perf_counter()
    if kind == "onnx":
        model = onnx.load(source)
        onnx.save(model, target)
    elif kind == "big":  # load, optimize (no certificates), save; each phase timed
        model = io.load_model(source)
        loaded = time.perf_counter()
        model, report = optimize_ir(model, passes.split(",") if passes else None, certify=False)
        optimized = time.perf_counter()
        io.save_model(model, target, input_path=source)
        return {"seconds": time.perf_counter() - started, "load": loaded - started, "optimize": optimized - loaded,
                "save": time.perf_counter() - optimized, "nodes_before": report.nodes_before,
                "nodes_after": report.nodes_after, "rewrites": sum(report.log.counts().values()),
                "budget_refused": (report.constant_budget or {}).get("refused", 0),
                "import_seconds": import_seconds, "peak_rss": peak_rss_bytes(), "rss_file": rss_file_bytes()}
    else:
        model = io.load_model(source)
        model, _ = optimize_ir(model, passes.split(",") if passes else None)
        io.save_model(model, target, input_path=source)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "import_seconds": import_seconds, "peak_rss": peak_rss_bytes()}


def peak_rss_bytes() -> int:
    """This process's own high-water RSS. ru_maxrss is not used: Linux carries it over from the
    parent through fork and exec, so a child would report the parent's peak."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_file_bytes() -> int:
    """Resident pages of mapped files at the end (RssFile): weights read through memory maps."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(kind: str, source: Path, target: Path, passes: str | None = None) -> dict:
    args = [sys.executable, __file__, "--step", kind, str(source), str(target)] + ([passes] if passes else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def chain_table(sizes, passes: str | None) -> Table:
    table = Table(title="Conv-Add-BN-Relu chain: load + optimize + save")
    for column in ("blocks", "nodes", "seconds", "s per 1000 nodes", "ratio to previous"):
        table.add_column(column, justify="right")
    previous = None
    with tempfile.TemporaryDirectory() as tmp:
        for blocks in sizes:
            source = Path(tmp) / f"chain{blocks}.onnx"
            onnx.save(chain_model(blocks), source)
            runs = [measure("onnxrefine", source, Path(tmp) / "out.onnx", passes)["seconds"] for _ in range(3)]
            seconds = sorted(runs)[1]
            ratio = f"{seconds / previous:.2f}" if previous else "-"
            table.add_row(str(blocks), str(4 * blocks), f"{seconds:.3f}", f"{1000 * seconds / (4 * blocks):.3f}", ratio)
            previous = seconds
    return table


def big_table(title: str, build, sizes, passes: str | None) -> Table:
    """One row per size: nodes, rewrites, load / optimize / save seconds, optimize seconds per
    1000 nodes (flat when linear), ratio of optimize time to the previous row's, peak RSS."""
    table = Table(title=title)
    for column in ("size", "nodes", "nodes after", "rewrites", "load s", "optimize s", "save s",
                   "optimize s / 1k nodes", "ratio", "nodes ratio", "peak RSS (MB)", "mapped at end (MB)",
                   "budget refusals"):
        table.add_column(column, justify="right")
    previous = None
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            source = Path(tmp) / f"big{size}.onnx"
            onnx.save(build(size), source)
            r = measure("big", source, Path(tmp) / "out.onnx", passes)
            ratio = nodes_ratio = "-"
            if previous is not None:
                ratio = f"{r['optimize'] / previous['optimize']:.2f}"
                nodes_ratio = f"{r['nodes_before'] / previous['nodes_before']:.2f}"
            table.add_row(str(size), str(r["nodes_before"]), str(r["nodes_after"]), str(r["rewrites"]),
                          f"{r['load']:.2f}", f"{r['optimize']:.2f}", f"{r['save']:.2f}",
                          f"{1000 * r['optimize'] / r['nodes_before']:.3f}", ratio, nodes_ratio,
                          f"{r['peak_rss'] / 1e6:.0f}", f"{r.get('rss_file', 0) / 1e6:.0f}",
                          str(r.get("budget_refused", 0)))
            previous = r
            source.unlink()
    return table


def resnet_table(passes: str | None) -> Table:
    table = Table(title="ResNet-50-shaped model with BatchNormalization kept")
    for column in ("step", "seconds", "import (s)", "peak RSS (MB)", "file (MB)"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "resnet50.onnx"
        onnx.save(resnet50_model(), source)
        size = source.stat().st_size
        baseline = measure("onnx", source, Path(tmp) / "copy.onnx")
        ours = measure("onnxrefine", source, Path(tmp) / "opt.onnx", passes)
        for label, result in (("onnx.load + onnx.save", baseline), ("onnxrefine optimize (load to save)", ours)):
            table.add_row(label, f"{result['seconds']:.2f}", f"{result['import_seconds']:.2f}",
                          f"{result['peak_rss'] / 1e6:.0f}", f"{size / 1e6:.0f}")
        table.add_section()
        table.add_row("time ratio", f"{ours['seconds'] / baseline['seconds']:.2f}", "", "", "")
        table.add_row("peak RSS / file size", "", "", f"{ours['peak_rss'] / size:.2f}", "")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chain", action="store_true")
    parser.add_argument("--resnet", action="store_true")
    parser.add_argument("--decoder", action="store_true")
    parser.add_argument("--big-chain", action="store_true")
    parser.add_argument("--sizes", default="400,800,1600,3200")
    parser.add_argument("--decoder-layers", default="100,200,400,800,1600")
    parser.add_argument("--big-sizes", default="62500,125000,250000,500000,1000000")
    parser.add_argument("--passes", default=None, help="pass list (default pipeline when omitted)")
    parser.add_argument("--step", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        kind, source, target, *rest = args.step
        print(json.dumps(_step(kind, source, target, rest[0] if rest else None)))
        return 0
    both = not (args.chain or args.resnet or args.decoder or args.big_chain)
    console = Console(width=200)  # a table wider than a pipe's 80 columns
    if args.decoder:
        from _big_graphs import decoder_model

        console.print(big_table("decoder-only transformer (layers): load + optimize + save",
                                decoder_model, [int(s) for s in args.decoder_layers.split(",")], args.passes))
    if args.big_chain:
        from _big_graphs import chain_model as big_chain_model

        console.print(big_table("synthetic chain of removable no-ops (nodes): load + optimize + save",
                                big_chain_model, [int(s) for s in args.big_sizes.split(",")], args.passes))
    if args.chain or both:
        console.print(chain_table([int(s) for s in args.sizes.split(",")], args.passes))
    if args.resnet or both:
        console.print(resnet_table(args.passes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
