"""Why BatchNormalization, Mul and Add after a quantized layer are not folded into it.

The float fusions (fuse_bn_into_conv, fuse_mul_into_conv, fuse_add_bias_into_conv,
fuse_bn_into_gemm) need a constant float weight; in a QDQ model the weight is
DequantizeLinear(int8, scale, zero_point), which fold_constants keeps (ir/quantization.py), so
those rules never see it. These rules match the same shapes over a dequantized weight and refuse
them with the reason, so `--explain` and the report say why a quantized model keeps its
BatchNormalization nodes instead of leaving the user to guess.

Folding is refused in every case, by design: the folded weight W*s must stay an int8 tensor on
its quantization grid, i.e. the fold could only rescale the DequantizeLinear scale, and the
result equals the original only for power-of-two positive factors with no shift (a BN shift or
an added constant would have to be a whole multiple of the int32 bias scale). Even then the
fold makes Conv -> QuantizeLinear adjacent where a float op stood between them, and onnxruntime
then fuses a QLinearConv that rounds differently from the float Conv the original ran.
"""

from __future__ import annotations

from onnxrefine.errors import RewriteRefused
from onnxrefine.passes.registry import PassSpec
from onnxrefine.rewrite.pattern import Const, Match, Op, Rest, Var
from onnxrefine.rewrite.rule import Replacement, RewriteContext, Rule

_LAYERS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def _quantized_layer() -> Op:
    return Op(_LAYERS, Var("x"), Op("DequantizeLinear", Rest("dq_inputs"), name="dq"), Rest("rest"), name="layer")


def refuse_quantized_fold(m: Match, ctx: RewriteContext) -> Replacement:
    what = m["op"].op_type
    raise RewriteRefused("quant.fold_into_layer",
        f"{what} after a {m['layer'].op_type} whose weight is quantized (DequantizeLinear): folding it would "
        "change the int8 weight or its scale, which is not exactly representable (only a power-of-two "
        "factor with no shift is) and breaks the quantized unit the runtime fuses; kept as it is")


QUANTIZED_BN = Rule(
    "quantized_layer_bn",
    Op("BatchNormalization", _quantized_layer(), Var("scale"), Var("bias"), Var("mean"), Var("var"), name="op"),
    refuse_quantized_fold,
)
QUANTIZED_MUL = Rule("quantized_layer_mul", Op("Mul", _quantized_layer(), Const("c"), name="op"), refuse_quantized_fold)
QUANTIZED_ADD = Rule("quantized_layer_add", Op("Add", _quantized_layer(), Const("c"), name="op"), refuse_quantized_fold)


PASSES = (
    PassSpec(
        "keep_quantized_layers",
        "Never rewrites: reports (--explain) why BatchNormalization/Mul/Add after a Conv/Gemm/MatMul with a "
        "dequantized weight is not folded into it (the weight must stay on its int8 grid)",
        rules=(QUANTIZED_BN, QUANTIZED_MUL, QUANTIZED_ADD),
        order=40,
        not_fuzzed="it never rewrites (its rules only refuse, to explain)",
    ),
)
