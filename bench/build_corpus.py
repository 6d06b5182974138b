"""Export a corpus of real architectures (random weights) to ONNX for the peer benchmark.

Run with the bench venv (see bench/requirements.txt):

    bench/.venv-bench/bin/python bench/build_corpus.py            # all models
    bench/.venv-bench/bin/python bench/build_corpus.py --quick    # resnet18, mobilenet_v2, squeezenet1_0
    bench/.venv-bench/bin/python bench/build_corpus.py --models resnet50,bert-base

Every model is exported in eval mode with the classic TorchScript exporter, BatchNormalization kept
(TrainingMode.PRESERVE on an eval-mode model gives inference-form BN, training_mode=0) and exporter
constant folding off, so the optimizers have real work to do. BN running statistics and affine
parameters are randomized (seeded): with the default mean 0 / var 1 / gamma 1 / beta 0 a BN fold would
be numerically trivial and would hide folding errors.

For each model it writes <name>.onnx, <name>.inputs.npz (the fixed feeds the runner uses) and updates
bench/corpus/manifest.json with file size, node count and op histogram. Each export is checked: BN is
still present in inference form, and onnxruntime (optimizations off) reproduces the torch output.
"""
from __future__ import annotations

import argparse
import collections
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import types
from pathlib import Path

import numpy as np

import corpus_extra

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_CORPUS = BENCH_DIR / "corpus"
OPSET = 17
SEED = 0

VISION_MODELS = [
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "densenet121",
    "convnext_tiny",
    "regnet_y_400mf",
    "shufflenet_v2_x1_0",
    "squeezenet1_0",
    "deeplabv3_mobilenet_v3_large",
]
TRANSFORMER_MODELS = ["bert-base", "gpt2-small"]
ALL_MODELS = VISION_MODELS + TRANSFORMER_MODELS
# Quantized, float16 and contrib-op models derived from the exports above (bench/corpus_classes.py).
from corpus_classes import DERIVED_MODELS, derive_one  # noqa: E402

ALL_MODELS = ALL_MODELS + list(DERIVED_MODELS)
QUICK_MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_0"]
SEQ_LEN = 128


_TORCHVISION_FALLBACK_NOTE: str | None = None

# Where each exported torchvision builder lives, for the fallback import below.
TORCHVISION_SUBMODULES = {
    "resnet18": "resnet",
    "resnet50": "resnet",
    "mobilenet_v2": "mobilenetv2",
    "mobilenet_v3_small": "mobilenetv3",
    "efficientnet_b0": "efficientnet",
    "densenet121": "densenet",
    "convnext_tiny": "convnext",
    "regnet_y_400mf": "regnet",
    "shufflenet_v2_x1_0": "shufflenetv2",
    "squeezenet1_0": "squeezenet",
    "deeplabv3_mobilenet_v3_large": "segmentation.deeplabv3",
}


def import_torchvision_builder(name: str):
    """Return (model builder, note), even when torchvision's compiled ops fail to load.

    torchvision's C++ extension is built against one exact torch build; against another wheel
    `import torchvision` fails (typically "operator torchvision::nms does not exist" from its fake-op
    registrations) while the model definitions are pure Python. The fallback registers empty package
    shells for torchvision, torchvision.ops and torchvision.models in sys.modules, whose __path__
    points at the installed files, so that the one model file needed (and the pure-Python helpers it
    imports, e.g. torchvision.ops.misc) load without running the package __init__ files that load the
    compiled extension. Nothing installed is modified. None of the exported architectures calls a
    compiled op.
    """
    global _TORCHVISION_FALLBACK_NOTE
    if _TORCHVISION_FALLBACK_NOTE is not None:
        module = importlib.import_module(f"torchvision.models.{TORCHVISION_SUBMODULES[name]}")
        return getattr(module, name), _TORCHVISION_FALLBACK_NOTE
    try:
        import torchvision.models as models

        builder = getattr(models.segmentation, name, None) or getattr(models, name)
        return builder, "torchvision imported normally"
    except Exception as exc:  # noqa: BLE001 - any import failure triggers the fallback
        first_error = f"{type(exc).__name__}: {exc}"
    for loaded in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[loaded]
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"torchvision is not installed ({first_error})")
    package_dir = list(spec.submodule_search_locations)[0]

    def package_shell(dotted: str) -> types.ModuleType:
        directory = os.path.join(package_dir, *dotted.split(".")[1:])
        module = types.ModuleType(dotted)
        module.__path__ = [directory]
        module.__spec__ = importlib.machinery.ModuleSpec(dotted, None, is_package=True)
        module.__spec__.submodule_search_locations = [directory]
        sys.modules[dotted] = module
        parent, _, child = dotted.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)
        return module

    package_shell("torchvision").__version__ = "unknown (compiled ops unavailable)"
    extension = types.ModuleType("torchvision.extension")
    extension._has_ops = lambda: False
    extension._assert_has_ops = lambda: None
    sys.modules["torchvision.extension"] = extension
    for dotted in ("torchvision.ops", "torchvision.models", "torchvision.models.segmentation"):
        package_shell(dotted)
    # Model files import these pure-Python layers from the torchvision.ops package namespace.
    ops = sys.modules["torchvision.ops"]
    for helper in ("misc", "stochastic_depth"):
        helper_module = importlib.import_module(f"torchvision.ops.{helper}")
        ops.__dict__.update({k: v for k, v in vars(helper_module).items() if not k.startswith("_")})
    _TORCHVISION_FALLBACK_NOTE = f"torchvision import failed ({first_error}); loaded model files only"
    module = importlib.import_module(f"torchvision.models.{TORCHVISION_SUBMODULES[name]}")
    return getattr(module, name), _TORCHVISION_FALLBACK_NOTE


def randomize_batchnorm(module, generator) -> int:
    import torch

    count = 0
    for sub in module.modules():
        if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm):
            n = sub.num_features
            with torch.no_grad():
                sub.running_mean.copy_(torch.randn(n, generator=generator) * 0.1)
                sub.running_var.copy_(torch.rand(n, generator=generator) * 1.5 + 0.5)
                if sub.affine:
                    sub.weight.copy_(torch.rand(n, generator=generator) * 0.8 + 0.6)
                    sub.bias.copy_(torch.randn(n, generator=generator) * 0.1)
            count += 1
    return count


class FirstOutput:
    """Wrap a model whose forward returns a dict / ModelOutput so the graph has named tensors."""

    @staticmethod
    def wrap(model, keys, arg_names=None):
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = model

            def forward(self, *args):
                if arg_names:  # transformers' forward has optional arguments in between
                    result = self.inner(**dict(zip(arg_names, args)))
                else:
                    result = self.inner(*args)
                return tuple(result[k] for k in keys)

        return Wrapper().eval()


def make_model(name: str, generator):
    """Return (module, example_args, input_names, output_names, note)."""
    import torch

    if name in VISION_MODELS:
        builder, note = import_torchvision_builder(name)
        if name == "deeplabv3_mobilenet_v3_large":
            seg = builder(weights=None, weights_backbone=None, aux_loss=False)
            module = FirstOutput.wrap(seg, ["out"])
        else:
            module = builder(weights=None)
        image = torch.randn(1, 3, 224, 224, generator=generator)
        return module, (image,), ["input"], ["output"], note
    if name == "bert-base":
        from transformers import BertConfig, BertModel

        config = BertConfig()
        config._attn_implementation = "eager"
        model = BertModel(config, add_pooling_layer=True)
        module = FirstOutput.wrap(
            model,
            ["last_hidden_state", "pooler_output"],
            ["input_ids", "attention_mask", "token_type_ids"],
        )
        ids = torch.randint(0, config.vocab_size, (1, SEQ_LEN), generator=generator)
        mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
        token_types = torch.zeros(1, SEQ_LEN, dtype=torch.int64)
        return (
            module,
            (ids, mask, token_types),
            ["input_ids", "attention_mask", "token_type_ids"],
            ["last_hidden_state", "pooler_output"],
            "BertModel(BertConfig()), eager attention, random weights",
        )
    if name == "gpt2-small":
        from transformers import GPT2Config, GPT2Model

        config = GPT2Config(use_cache=False)
        config._attn_implementation = "eager"
        model = GPT2Model(config)
        module = FirstOutput.wrap(
            model, ["last_hidden_state"], ["input_ids", "attention_mask"]
        )
        ids = torch.randint(0, config.vocab_size, (1, SEQ_LEN), generator=generator)
        # With an explicit attention mask transformers skips its packed-sequence detection, which
        # uses aten::diff, an op the classic exporter cannot translate.
        mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
        return (
            module,
            (ids, mask),
            ["input_ids", "attention_mask"],
            ["last_hidden_state"],
            "GPT2Model(GPT2Config(use_cache=False)), eager attention, random weights",
        )
    if name in corpus_extra.EXTRA_MODELS:
        return corpus_extra.make_extra(name, generator)
    raise ValueError(f"unknown model {name!r}; known: {', '.join(ALL_MODELS + corpus_extra.EXTRA_MODELS)}")


def op_histogram(model_proto) -> dict[str, int]:
    counts = collections.Counter(node.op_type for node in model_proto.graph.node)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def check_batchnorm_inference_form(model_proto) -> int:
    """Count BN nodes; fail if any is in training form (training_mode=1 or extra outputs)."""
    count = 0
    for node in model_proto.graph.node:
        if node.op_type != "BatchNormalization":
            continue
        count += 1
        training = [a.i for a in node.attribute if a.name == "training_mode"]
        if (training and training[0] != 0) or len(node.output) != 1:
            raise RuntimeError(f"BatchNormalization {node.name} exported in training form")
    return count


def run_onnxruntime(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def export_one(name: str, corpus: Path) -> dict:
    import onnx
    import torch

    torch.manual_seed(SEED)
    generator = torch.Generator().manual_seed(SEED)
    base, variant = corpus_extra.split_variant(name)  # <model>[@fold|@dynamo], see corpus_extra.py
    module, args, input_names, output_names, note = make_model(base, generator)
    module.eval()
    bn_randomized = randomize_batchnorm(module, generator)
    with torch.no_grad():
        expected = module(*args)
    if isinstance(expected, torch.Tensor):
        expected = (expected,)
    path = corpus / f"{name}.onnx"
    tmp_path = corpus / f".{name}.onnx.tmp"
    started = time.perf_counter()
    corpus_extra.export(module, args, tmp_path, variant, input_names, output_names, OPSET, base)
    export_seconds = time.perf_counter() - started
    os.replace(tmp_path, path)

    model_proto = onnx.load(str(path))
    bn_nodes = check_batchnorm_inference_form(model_proto)
    if bn_randomized and not bn_nodes and variant == "nofold":  # folding exporters fold BN away
        raise RuntimeError(f"{name}: the model has BatchNorm modules but the export has no BN node")
    feeds = {n: a.numpy() for n, a in zip(input_names, args)}
    np.savez(corpus / f"{name}.inputs.npz", **feeds)
    got = run_onnxruntime(path, feeds)
    torch_vs_ort = max(
        float(np.max(np.abs(g.astype(np.float64) - e.numpy().astype(np.float64))))
        for g, e in zip(got, expected)
    )
    return {
        "name": name,
        "file": path.name,
        "inputs_file": f"{name}.inputs.npz",
        "file_bytes": path.stat().st_size,
        "nodes": len(model_proto.graph.node) + sum(len(f.node) for f in model_proto.functions),
        "functions": len(model_proto.functions),
        "variant": variant,
        "batchnorm_nodes": bn_nodes,
        "initializers": len(model_proto.graph.initializer),
        "opset": next((o.version for o in model_proto.opset_import if o.domain in ("", "ai.onnx")), OPSET),
        "op_histogram": op_histogram(model_proto),
        "inputs": {n: [list(a.shape), str(a.dtype)] for n, a in feeds.items()},
        "export_seconds": round(export_seconds, 2),
        "torch_vs_onnxruntime_max_abs": torch_vs_ort,
        "note": note,
    }


def load_manifest(corpus: Path) -> dict:
    path = corpus / "manifest.json"
    if path.exists():
        return json.loads(path.read_text())
    return {"models": {}}


def save_manifest(corpus: Path, manifest: dict) -> None:
    path = corpus / "manifest.json"
    tmp = corpus / ".manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, path)


def _ensure_base(base: str, corpus: Path, manifest: dict) -> None:
    """Export the float model a derived one is made from, when the corpus lacks it."""
    if (corpus / f"{base}.onnx").exists() and (corpus / f"{base}.inputs.npz").exists():
        return
    manifest["models"][base] = export_one(base, corpus)
    save_manifest(corpus, manifest)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="only " + ", ".join(QUICK_MODELS))
    parser.add_argument("--models", help="comma-separated subset of: " + ", ".join(ALL_MODELS + corpus_extra.EXTRA_MODELS)
                        + "; a name may end in @fold or @dynamo (export variants, see corpus_extra.py)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--force", action="store_true", help="re-export models already present")
    args = parser.parse_args(argv)

    names = QUICK_MODELS if args.quick else ALL_MODELS
    if args.models:
        names = [n.strip() for n in args.models.split(",") if n.strip()]
        unknown = [n for n in names if corpus_extra.split_variant(n)[0] not in ALL_MODELS + corpus_extra.EXTRA_MODELS]
        if unknown:
            parser.error(f"unknown models: {', '.join(unknown)}")
    args.corpus.mkdir(parents=True, exist_ok=True)
    manifest = load_manifest(args.corpus)
    failures = []
    for name in names:
        if not args.force and name in manifest["models"] and (args.corpus / f"{name}.onnx").exists():
            print(f"{name:32s} present, skipped (use --force to re-export)")
            continue
        try:
            if name in DERIVED_MODELS:
                entry = derive_one(name, args.corpus, lambda base: _ensure_base(base, args.corpus, manifest),
                                   run_onnxruntime, op_histogram)
            else:
                entry = export_one(name, args.corpus)
        except Exception as exc:  # noqa: BLE001 - report and continue with the next model
            failures.append(name)
            print(f"{name:32s} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        manifest["models"][name] = entry
        save_manifest(args.corpus, manifest)
        print(
            f"{name:32s} {entry['file_bytes'] / 1e6:8.1f} MB {entry['nodes']:6d} nodes "
            f"{entry['batchnorm_nodes']:4d} BN  export {entry['export_seconds']:6.1f} s  "
            + (f"torch-vs-ort {entry['torch_vs_onnxruntime_max_abs']:.2e}" if "torch_vs_onnxruntime_max_abs" in entry
               else f"{entry['class']} from {entry['base']}")
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
