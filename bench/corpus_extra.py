"""More corpus classes for build_corpus.py: detection heads, a ViT, an LLM decoder with a KV cache,
and the same architectures exported three ways.

A corpus name is `<model>` (classic TorchScript exporter, exporter constant folding off: the
corpus default), `<model>@fold` (classic exporter, constant folding on: what torch.onnx.export
gives by default), `<model>@dyn` (the same with dynamic axes: batch, and sequence / past lengths for
token models, the way models are usually shipped) or `<model>@dynamo` (torch.onnx.export(dynamo=True), the default exporter now;
exported with optimize=False: the raw graph is what the optimizers are compared on) or
`<model>@functions` (classic exporter with export_modules_as_functions: every transformer layer /
detection head a model-local function; torch 2.14's dynamo exporter emits none for these models).

- tiny_yolo: a small YOLO-style network (Conv/BN/LeakyReLU backbone, nearest upsampling, two
  detection heads whose grid and stride come from the feature-map shape, as in YOLO's Detect
  module: `ny, nx = x.shape[2:]; stride = img / ny`). The Shape->Gather->Div->Mul chains fold
  once the shape is static.
- vit_b_16, ssdlite320: torchvision's vit_b_16 and ssdlite320_mobilenet_v3_large (the detector's
  backbone and heads only: box decoding and NMS are data-dependent post-processing).
- llama-kv: a transformers LlamaForCausalLM with random weights (2 layers, grouped-query attention),
  one decoding step over a 16-token past: inputs input_ids, attention_mask, position_ids and
  past_key_values as flat past.<layer>.key/value tensors; outputs logits and present.<layer>.*.
"""
from __future__ import annotations

VARIANTS = ("fold", "dyn", "dynamo", "functions")
EXTRA_VISION = ["tiny_yolo", "vit_b_16", "ssdlite320"]
EXTRA_LLM = ["llama-kv"]
EXTRA_MODELS = EXTRA_VISION + EXTRA_LLM
LLM_LAYERS = 2
PAST_LEN = 16
NEW_TOKENS = 4


def split_variant(name: str) -> tuple[str, str]:
    """'bert-base@dynamo' -> ('bert-base', 'dynamo'); a plain name -> (name, 'nofold')."""
    base, sep, variant = name.partition("@")
    if sep and variant not in VARIANTS:
        raise ValueError(f"unknown export variant {variant!r} in {name!r} (known: {', '.join(VARIANTS)})")
    return base, (variant if sep else "nofold")


def tiny_yolo():
    import torch
    from torch import nn

    def block(cin, cout, stride=1):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.LeakyReLU(0.1))

    class Detect(nn.Module):
        """YOLO's detection head: grid offsets and stride derived from the feature-map shape."""

        def __init__(self, cin, anchors, classes=4):
            super().__init__()
            self.na, self.no = len(anchors), classes + 5
            self.conv = nn.Conv2d(cin, self.na * self.no, 1)
            self.register_buffer("anchors", torch.tensor(anchors, dtype=torch.float32).view(1, -1, 1, 1, 2))

        def forward(self, x, image_size: int):
            x = self.conv(x)
            bs, _, ny, nx = x.shape
            stride = image_size / ny
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).sigmoid()
            yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
            grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float()
            xy = (x[..., 0:2] * 2 - 0.5 + grid) * stride
            wh = (x[..., 2:4] * 2) ** 2 * self.anchors
            return torch.cat((xy, wh, x[..., 4:]), -1).view(bs, -1, self.no)

    class TinyYolo(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(block(3, 16, 2), block(16, 32, 2), block(32, 64, 2), block(64, 64, 2))
            self.down = nn.Sequential(block(64, 128, 2), block(128, 128))
            self.lateral = block(128, 64)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.fuse = block(128, 64)
            self.head_small = Detect(128, [[10, 14], [23, 27], [37, 58]])
            self.head_large = Detect(64, [[81, 82], [135, 169], [344, 319]])

        def forward(self, image):
            size = image.shape[-1]
            p4 = self.stem(image)
            p5 = self.down(p4)
            merged = self.fuse(torch.cat((self.up(self.lateral(p5)), p4), 1))
            return torch.cat((self.head_small(p5, size), self.head_large(merged, size)), 1)

    return TinyYolo()


def make_extra(name: str, generator):
    """(module, args, input_names, output_names, note) for an EXTRA_MODELS name."""
    import torch

    if name == "tiny_yolo":
        image = torch.randn(1, 3, 256, 256, generator=generator)
        return tiny_yolo(), (image,), ["image"], ["detections"], "YOLO-style: 2 heads, grid from shapes"
    if name == "vit_b_16":
        import torchvision.models as models

        image = torch.randn(1, 3, 224, 224, generator=generator)
        return models.vit_b_16(weights=None), (image,), ["input"], ["output"], "torchvision vit_b_16"
    if name == "ssdlite320":
        import torchvision.models.detection as detection

        detector = detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None)

        class Heads(torch.nn.Module):
            """Backbone and heads: NMS and box decoding are data-dependent post-processing."""

            def __init__(self):
                super().__init__()
                self.backbone, self.head = detector.backbone, detector.head

            def forward(self, image):
                features = list(self.backbone(image).values())
                out = self.head(features)
                return out["bbox_regression"], out["cls_logits"]

        image = torch.randn(1, 3, 320, 320, generator=generator)
        return (Heads(), (image,), ["image"], ["bbox_regression", "cls_logits"],
                "torchvision ssdlite320_mobilenet_v3_large, backbone+heads")
    if name == "llama-kv":
        return _llama_kv(generator)
    raise ValueError(f"unknown model {name!r}")


def _llama_kv(generator):
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=344, num_hidden_layers=LLM_LAYERS,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         use_cache=True)
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).eval()
    head_dim = config.hidden_size // config.num_attention_heads

    class Step(torch.nn.Module):
        """One decoding step with the cache as flat tensors (what ONNX runtimes for LLMs feed)."""

        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = DynamicCache()
            for layer in range(LLM_LAYERS):
                cache.update(past[2 * layer], past[2 * layer + 1], layer)
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=cache, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    ids = torch.randint(0, config.vocab_size, (1, NEW_TOKENS), generator=generator)
    mask = torch.ones(1, PAST_LEN + NEW_TOKENS, dtype=torch.int64)
    positions = torch.arange(PAST_LEN, PAST_LEN + NEW_TOKENS, dtype=torch.int64).unsqueeze(0)
    past = tuple(torch.randn(1, config.num_key_value_heads, PAST_LEN, head_dim, generator=generator)
                 for _ in range(2 * LLM_LAYERS))
    past_names = [f"past.{layer}.{kind}" for layer in range(LLM_LAYERS) for kind in ("key", "value")]
    present_names = [f"present.{layer}.{kind}" for layer in range(LLM_LAYERS) for kind in ("key", "value")]
    return (Step().eval(), (ids, mask, positions, *past), ["input_ids", "attention_mask", "position_ids",
            *past_names], ["logits", *present_names],
            f"LlamaForCausalLM, {LLM_LAYERS} layers, GQA 4/2 heads, hidden 128, random weights; "
            f"one step of {NEW_TOKENS} tokens over a {PAST_LEN}-token KV cache")


# Module classes exported as model-local functions in the @functions variant.
FUNCTION_MODULES = {"LlamaDecoderLayer", "BertLayer", "GPT2Block", "Detect", "EncoderBlock"}


def dynamic_axes(base: str, args, input_names, output_names) -> dict:
    """Symbolic axes for the @dyn variant: axis 0 of everything is `batch`; token inputs (integer,
    rank 2) and the hidden states / logits have a `sequence` axis; the KV cache a `past` axis."""
    axes = {}
    for name, arg in zip(input_names, args):
        axes[name] = {0: "batch"}
        if not arg.is_floating_point() and arg.dim() == 2:
            axes[name][1] = "total" if name == "attention_mask" and base == "llama-kv" else "sequence"
        if name.startswith("past."):
            axes[name][2] = "past"
    for name in output_names:
        axes[name] = {0: "batch"}
        if name in ("last_hidden_state", "logits"):
            axes[name][1] = "sequence"
        if name.startswith("present."):
            axes[name][2] = "total"
    return axes


def export(module, args, path, variant: str, input_names, output_names, opset: int, base: str = "") -> None:
    import torch

    if variant == "functions":
        layer_types = {type(m) for m in module.modules()
                       if type(m).__name__ in FUNCTION_MODULES}
        torch.onnx.export(module, args, str(path), opset_version=max(opset, 15), do_constant_folding=False,
                          dynamo=False, input_names=input_names, output_names=output_names,
                          export_modules_as_functions=layer_types or False)
        return
    if variant == "dynamo":
        program = torch.onnx.export(module, args, dynamo=True, optimize=False, opset_version=max(opset, 18),
                                    input_names=input_names, output_names=output_names,
                                    external_data=False)
        program.save(str(path), external_data=False)
        return
    torch.onnx.export(module, args, str(path), opset_version=opset,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=variant in ("fold", "dyn"),
                      dynamo=False, input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic_axes(base, args, input_names, output_names) if variant == "dyn" else None)
