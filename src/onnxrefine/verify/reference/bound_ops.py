"""The per-op rules of the error bound (bound.py): how each op rounds and carries its inputs' bounds.

A rule reads an OpContext (the node, its float64 inputs and outputs, its inputs' bounds and coherent
bounds) and returns, per output, (bound, coherent) in the compact forms of reference/bound.py. The
formulas, and where they are conservative, are in docs/verification.md ("The per-element bound").
u is the unit roundoff of the output's dtype; gamma(n) = n*u / (1 - n*u).
"""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np
import onnx

from onnxrefine.verify.graphinfo import underflow_floor
from onnxrefine.verify.reference.base import KERNELS, NodeCall
from onnxrefine.verify.reference.bound_exact import exact_product_of, exact_quotient_of, exact_sum_of, representable

NOT_DERIVED = float("nan")  # compact form: NaN * |v| is NaN on every element
UNBOUNDED = math.inf  # compact form of a bound that is +inf on every element

# Accuracy of onnxruntime's CPU kernels for the functions IEEE does not round correctly, in ulps of
# the result (2u|y| each). Not derivable from the spec: the kernels are polynomial approximations (MLAS).
# Each figure is at least 1.5x the worst error measured against float64 over a sweep of float32
# inputs (tests/test_error_bound.py::test_library_accuracy_covers_onnxruntime asserts both the cover
# and that the margin stays under 4x).
LIBRARY_ULPS = {"Exp": 2.0, "Log": 3.0, "Tanh": 4.0, "Sigmoid": 2.0, "Erf": 2.0, "Softplus": 4.0, "Pow": 2.0,
                "Sin": 3.0, "Cos": 3.0, "Softmax": 2.0, "LogSoftmax": 3.0, "LayerNormalization": 2.0}
# ... plus an absolute error in units of u, where the kernel computes through 1 +- something (Sigmoid as
# 0.5 + 0.5 tanh(x/2): an error of ~2u whatever |y|, measured)
LIBRARY_ABSOLUTE_U = {"Sigmoid": 4.0}

# The probable pass's nonlinear rules take an input's error to reach REACH_LAMBDA * sigma (capped by its
# worst-case bound): the lambda of probable_lambda (bound.py) for 10^15 judged elements, more than any
# verdict uses, so that lambda * sigma_out covers f over [x - lambda sigma, x + lambda sigma] for every
# lambda a verdict takes (a slope taken at x alone does not, where lambda sigma is not small)
REACH_LAMBDA = math.sqrt(2.0 * math.log(2.0 * 1e15 / 1e-6))


def dtype_of(elem_type) -> np.dtype | None:
    if not elem_type:
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:  # noqa: BLE001 - a type numpy cannot hold: no bound
        return None


def is_float(dtype) -> bool:
    return dtype is not None and (dtype.kind == "f" or dtype.name in ("bfloat16",))


def materialize(compact, value) -> np.ndarray:
    """A compact bound (None, c for c*|value|, or an array) as a float64 array of value's shape."""
    value = np.asarray(value)
    if compact is None:
        return np.zeros(value.shape)
    if isinstance(compact, float):
        if math.isnan(compact) or math.isinf(compact):
            return np.full(value.shape, compact)
        return compact * np.abs(value.astype(np.float64))
    return np.broadcast_to(np.asarray(compact, dtype=np.float64), value.shape)


@functools.lru_cache(maxsize=None)
def _type_limits(dtype) -> tuple[float, float]:
    """(underflow floor (underflow_floor); overflow limit: max plus half an ulp of max) of a float dtype."""
    top = float(ml_dtypes.finfo(dtype).max)
    return underflow_floor(dtype), top + float(np.spacing(np.asarray(top, dtype=dtype)).astype(np.float64)) / 2.0


def gamma(n: float, u: float) -> float:
    return n * u / (1.0 - n * u) if n * u < 1.0 else math.inf


# the probability that one sum's partial sums grow beyond probable_growth (a union over its terms)
GROWTH_FAILURE = 1e-6


def probable_growth(n: float, u: float) -> float:
    """An upper bound on |s^_k| / sum |terms| for every partial sum of an n-term sum in the
    independent-rounding model: Higham and Mary's |prod_k (1 + delta_k) - 1| <= exp(lambda sqrt(n) u +
    n u^2 / (1 - u)) - 1 but with probability 2 exp(-lambda^2 (1 - u)^2 / 2), lambda taken so that
    the n partial sums together fail with probability GROWTH_FAILURE. Finite for every n."""
    lam = math.sqrt(2.0 * math.log(2.0 * max(1.0, n) / GROWTH_FAILURE)) / (1.0 - u)
    return math.exp(lam * math.sqrt(n) * u + n * u * u / (1.0 - u))


class OpContext:
    """One node's inputs, outputs and input bounds, for a rule."""

    def __init__(self, node, inputs, attrs, opset, outputs, bounds, coherents, out_dtypes, evaluator, scope, narrow):
        self.node, self.inputs, self.attrs, self.opset, self.outputs = node, inputs, attrs, opset, outputs
        self.b, self.k = bounds, coherents
        self.out_dtypes, self.evaluator, self.scope, self.narrow = out_dtypes, evaluator, scope, narrow

    def r(self, index: int) -> np.ndarray:
        return np.asarray(self.inputs[index], dtype=np.float64)

    def y(self, index: int = 0) -> np.ndarray:
        return np.asarray(self.outputs[index], dtype=np.float64)

    def arrays(self, compacts) -> list:
        return [None if value is None else materialize(compact, value)
                for compact, value in zip(compacts, self.inputs)]

    def u(self, index: int = 0) -> float:
        dtype = self.out_dtypes[index] if index < len(self.out_dtypes) else None
        return float(ml_dtypes.finfo(dtype).eps) / 2.0 if is_float(dtype) else 0.0

    def kernel(self, inputs, op_type: str | None = None) -> list:
        """The node's float64 kernel (or op_type's, with the node's attributes) on `inputs`."""
        return list(KERNELS[op_type or self.node.op_type](NodeCall(self.node, inputs, self.attrs, self.opset,
                                                                   self.evaluator, self.scope)))

    def attr(self, name, default=None):
        return self.attrs.get(name, default)

    only_coherent = False  # an input's bound is unbounded everywhere: the output's is too, skip it
    # the probable pass (bound.py): `b` holds the inputs' error scales sigma, and sums use the
    # independent-rounding model (Higham and Mary): only the bound channel is computed
    probable = terms_pass = False  # terms_pass: the magnitude pass (bound.py), `b` MAGNITUDE_STEP * M_in
    run_valued = False  # in the magnitude pass: inputs hold a run's values where float64 has +-inf
    magnitude = None  # a dot product's |a| |w|, left by the worst-case pass for the probable one
    worst = None  # in the probable pass: the inputs' worst-case bounds (compact)

    def reach(self, index: int, sigma):
        """How far input `index` may err, for a nonlinear rule given `sigma`, the channel's input width:
        the worst-case pass's bound itself; in the probable pass (`sigma` a scale) REACH_LAMBDA * sigma,
        never beyond the worst-case bound; in the coherent pass the candidate's whole width, B + K (a
        legitimate candidate errs by up to T + K, and an op's increment over K grows with the offset
        T where its slope does: Relu's kink, Exp). Where B is not finite, K alone."""
        if self.coherent_pass:
            if index >= len(self.b) or self.b[index] is None or self.inputs[index] is None:
                return sigma
            worst = materialize(self.b[index], self.inputs[index])
            return width_of(sigma) + np.where(np.isfinite(worst), worst, 0.0)
        if not self.probable:
            return sigma
        worst = None if self.worst is None or index >= len(self.worst) else self.worst[index]
        grown = REACH_LAMBDA * width_of(sigma)
        if worst is None or (isinstance(worst, float) and math.isnan(worst)):
            return grown if worst is not None else 0.0 * grown
        return np.minimum(grown, materialize(worst, self.inputs[index]))

    coherent_pass = False  # channels(): the coherent bound's turn

    def channels(self):
        """(input bounds, rounding on?) for the bound, then for the coherent bound."""
        if not self.only_coherent:
            yield self.b, True
        if not self.probable:
            self.coherent_pass = True
            try:
                yield self.k, False
            finally:
                self.coherent_pass = False

    def gamma(self, n: float, index: int = 0) -> float:
        """The relative rounding of an n-term sum in the output's dtype: gamma(n) in the worst case;
        in the probable pass the scale of sum_k delta_k s_k (|delta_k| <= u independent, mean zero,
        |s_k| <= sum |terms|): sqrt(n) * u, grown by gamma(n) for the second-order terms; where n*u >= 1
        (a float16 sum of more than 2048 terms) gamma(n) is infinite, and the partial sums' growth is
        taken in the same model instead (probable_growth)."""
        u = self.u(index)
        if self.probable:
            return math.sqrt(n) * u * (1.0 + gamma(n, u) if n * u < 1.0 else probable_growth(n, u))
        return gamma(n, u)

    def finish(self, index: int, prop, ulps: float | None, exact=None, scale=None,
               underflows: int = 0, owned: bool = False) -> np.ndarray | None:
        """The output's bound: the carried bound `prop` plus this op's own rounding, `ulps` ulps of
        `scale` (default |y|; an Add's is |a| + |b|, so that any order of a sum is covered) grown by
        the carried bound (None: the op is exact), none where `exact` (a mask of elements the op
        computes exactly in any evaluation order), +inf where the run may overflow or y is not finite.
        `underflows`: roundings inside the op that may err by the underflow floor beyond what `prop` covers;
        `owned`: `prop` is the rule's own array, which an exact op's bound may then reuse in place."""
        y = self.y(index)
        dtype = self.out_dtypes[index] if index < len(self.out_dtypes) else None
        if not is_float(dtype):
            if prop is None:
                return None
            info = np.iinfo(dtype) if dtype is not None and dtype.kind in "iu" else None
            if info is not None:
                prop = np.where(np.abs(y) + prop > info.max, np.inf, prop)
            return prop
        u = self.u(index)
        carried = 0.0 if prop is None else prop
        floor, limit = _type_limits(dtype)
        # in place where possible: these arrays are as large as the op's output (asarray: a 0-d
        # ufunc result is a numpy scalar, which has no in-place form)
        magnitude = np.asarray(np.abs(y))
        if self.run_valued:  # where float64 has no finite y the terms are the run's (run_values.py)
            magnitude = np.where(np.isfinite(magnitude), magnitude, 0.0)
        narrow, own = self.narrow[index] if index < len(self.narrow) else False, None
        if narrow is not False:  # the reference rounds this value too: by |before - y| where it knows before
            before = narrow if isinstance(narrow, np.ndarray) and narrow.shape == y.shape else None
            with np.errstate(invalid="ignore"):
                own = u * magnitude + floor if before is None else np.abs(np.asarray(before, np.float64) - y)
        # |y| grown by the carried bound, in place: what the run may reach (the overflow test below)
        # and what this op's rounding is relative to
        grown = magnitude if prop is None else np.add(magnitude, carried, out=magnitude)
        if ulps is None:
            reuse = owned and isinstance(carried, np.ndarray) and carried.shape == y.shape \
                and carried.dtype == np.float64 and carried.flags.writeable
            bound = np.add(carried, underflows * floor, out=carried) if reuse \
                else np.asarray(np.add(np.broadcast_to(carried, y.shape), underflows * floor))
        else:
            rounding = np.asarray(np.multiply(grown if scale is None else np.add(scale, carried), 2.0 * ulps * u))
            rounding += 2.0 * ulps * floor
            if exact is not None:
                rounding[np.broadcast_to(exact, rounding.shape)] = 0.0
            rounding = np.add(rounding, carried, out=rounding if np.shape(carried) in ((), rounding.shape) else None)
            bound = rounding if rounding.shape == y.shape else np.broadcast_to(rounding, y.shape).copy()
        if own is not None:
            bound = np.asarray(bound + np.where(np.isnan(own), np.inf, own))
        # the run overflows only where its unrounded value can reach max + half an ulp of max (NaN and
        # inf fail the comparison too)
        if not (below := grown < limit).all():
            bound[~below] = np.inf
        return None if not bound.any() else bound

    def exact_value(self, index: int) -> bool:
        """Input `index` is exact (bound 0) in the run."""
        return index < len(self.b) and self.b[index] is None and self.inputs[index] is not None

    def precision_limit(self) -> float:
        """2^p: every integer up to it is representable in the output dtype."""
        dtype = self.out_dtypes[0]
        return 2.0 ** (np.finfo(dtype).nmant + 1) if dtype is not None and dtype.kind == "f" else 2.0 ** 8


def all_exact(compacts) -> bool:
    return all(compact is None for compact in compacts)


# ------------------------------------------------------------------------------------- elementwise

def elementwise_rule(prop, ulps: float | None = 0.5, exactness=None, scale=None):
    """A rule from `prop(ctx, input bounds as arrays) -> carried bound`; ulps None: exact op.
    `exactness(ctx)`: mask of elements the op computes exactly in any order; `scale(ctx)`: what its
    rounding is relative to (default |y|)."""
    def rule(ctx):
        results = []
        for compacts, rounding in ctx.channels():
            carried = None if all_exact(compacts) else prop(ctx, ctx.arrays(compacts))
            if rounding:
                op_ulps = LIBRARY_ULPS.get(ctx.node.op_type, ulps) if ulps is not None else None
                exact = exactness(ctx) if exactness is not None and op_ulps is not None else None
                bound = ctx.finish(0, carried, op_ulps, exact, None if scale is None else scale(ctx))
                absolute = LIBRARY_ABSOLUTE_U.get(ctx.node.op_type)
                if absolute is not None:
                    bound = (0.0 if bound is None else bound) + np.full(ctx.y().shape, absolute * ctx.u())
                results.append(bound)
            else:
                library = LIBRARY_ULPS.get(ctx.node.op_type)
                if library is not None and is_float(ctx.out_dtypes[0]):
                    # an approximating kernel may err alike on every element: coherent, not random
                    carried = (0.0 if carried is None else carried) + 2.0 * library * ctx.u() * np.abs(ctx.y()) \
                        + LIBRARY_ABSOLUTE_U.get(ctx.node.op_type, 0.0) * ctx.u()
                results.append(carried)
        return [tuple(results)]
    return rule


def _summands(ctx):
    return np.abs(ctx.r(0)) + np.abs(ctx.r(1))


def width_of(b):
    return 0.0 if b is None else b


def _add(ctx, b):
    return width_of(b[0]) + width_of(b[1])


def _mul(ctx, b):
    """|a^ b^ - a b| <= |a| e_b + |b| e_a + |e_a| |e_b|; the product of the errors, second order, takes
    one input's reach in the probable pass (lambda sigma_a * lambda sigma_b <= lambda sigma_a reach_b),
    in the coherent pass (T_a + K_a)(T_b + K_b) - T_a T_b <= K_a (B_b + K_b) + B_a K_b."""
    b0, b1 = width_of(b[0]), width_of(b[1])
    carried = b0 * width_of(ctx.reach(1, b[1]))
    if ctx.coherent_pass and b[1] is not None and ctx.b[0] is not None:
        worst = materialize(ctx.b[0], ctx.inputs[0])
        carried = carried + np.where(np.isfinite(worst), worst, 0.0) * b1
    if b[1] is not None:  # an exact side adds no term (no pass over an output-sized zero)
        carried = carried + np.abs(ctx.r(0)) * b1
    if b[0] is not None:
        carried = carried + np.abs(ctx.r(1)) * b0
    return carried


def _div(ctx, b):
    b0, b1 = width_of(b[0]), width_of(b[1])
    if ctx.out_dtypes[0] is not None and ctx.out_dtypes[0].kind in "iu":
        return np.where((b0 == 0) & (b1 == 0), 0.0, np.nan)
    room = np.abs(ctx.r(1)) - width_of(ctx.reach(1, b[1]))  # the divisor's interval, its reach in the probable pass
    return np.where(room > 0, (b0 + np.abs(ctx.y()) * b1) / np.where(room > 0, room, 1.0), np.inf)


def _integer_exact(ctx, b):
    return np.where(np.all([np.all(width_of(x) == 0) for x in b if x is not None]), 0.0, np.nan) + \
        np.zeros(ctx.y().shape)


def _monotone(function):
    """|f(x^) - f(x)| over |x^ - x| <= b for f monotone on the interval: its ends decide (in the
    probable pass, the ends of the input's reach: a jump within reach may happen)."""
    def prop(ctx, b):
        x, width = ctx.r(0), width_of(ctx.reach(0, b[0]))
        y = ctx.y()
        ends = [function(x - width), function(x + width)]
        return np.maximum(np.abs(ends[0] - y), np.abs(ends[1] - y))
    return prop


def _lipschitz(constant):
    return lambda ctx, b: constant * width_of(b[0])


def _cast(ctx, b):
    width = width_of(b[0])
    dtype = ctx.out_dtypes[0]
    if is_float(dtype) or not np.any(width):
        return width + np.zeros(ctx.y().shape)
    x = ctx.r(0)
    if dtype == np.bool_:
        return np.where((np.abs(x) <= width) & (width > 0), 1.0, 0.0)
    ends = (np.trunc(x - width), np.trunc(x + width))
    return np.maximum(np.abs(ends[0] - ctx.y()), np.abs(ends[1] - ctx.y()))


def _comparison(ctx, b):
    b0, b1 = width_of(b[0]), width_of(b[1])
    width = b0 + b1
    return np.where((np.abs(ctx.r(0) - ctx.r(1)) <= width) & (width > 0), 1.0, 0.0)


def _where(ctx, b):
    cond_b, bx, by = width_of(b[0]), width_of(b[1]), width_of(b[2])
    cond = np.asarray(ctx.inputs[0], dtype=bool)
    picked = np.where(cond, bx, by)
    either = np.maximum(bx, by) + np.abs(ctx.r(1) - ctx.r(2))
    return np.where(cond_b > 0, either, picked)


def _widest(ctx, b):
    out = np.zeros(ctx.y().shape)
    for index, item in ((i, width_of(x)) for i, x in enumerate(b) if x is not None):
        if ctx.terms_pass:  # the magnitude of the terms of the operand a Max or Min picks, not of the others
            item = np.where(np.asarray(ctx.inputs[index]) == ctx.y(), item, 0.0)
        out = np.maximum(out, item)
    return out


def _relu(ctx, b):
    """max(x^, 0) is exactly 0 where x + b < 0 (a run's value there is negative too); elsewhere within b:
    the interval's image, clip(x + r, 0, b) with r the input's reach (b in the worst case)."""
    width = width_of(b[0])
    return np.clip(ctx.r(0) + width_of(ctx.reach(0, b[0])), 0.0, width)


def _clip(ctx, b):
    return _widest(ctx, b)


def _leaky(ctx, b):
    return max(1.0, abs(float(ctx.attr("alpha", 0.01)))) * width_of(b[0])


def _hard_sigmoid_parts(ctx, alpha_default, beta_default):
    alpha = float(ctx.attr("alpha", alpha_default)) if ctx.node.op_type == "HardSigmoid" else 1.0 / 6.0
    beta = float(ctx.attr("beta", beta_default)) if ctx.node.op_type == "HardSigmoid" else 0.5
    return alpha, beta


def _hard_sigmoid(ctx, b):
    alpha, _ = _hard_sigmoid_parts(ctx, 0.2, 0.5)
    return abs(alpha) * width_of(b[0])


def _hard_swish(ctx, b):
    """x * hardsigmoid(x): the slope is at most max(1, |2 alpha x + beta|) over the interval, <= 1.5 on
    [-3, 3] and 1 beyond; plus the product of the two bounds."""
    width = width_of(b[0])
    return 1.5 * width + width * width / 6.0


def _hard_scale(ctx):
    """What a hard sigmoid's roundings are relative to: alpha*x and + beta round before the clamp
    (|alpha x| + |beta|), HardSwish's product by x after it (times |x|, plus |y|)."""
    alpha, beta = _hard_sigmoid_parts(ctx, 0.2, 0.5)
    x = np.abs(ctx.r(0))
    inner = abs(alpha) * x + abs(beta)
    return inner if ctx.node.op_type == "HardSigmoid" else x * inner + np.abs(ctx.y())


def _jump(function):
    return _monotone(function)


ELEMENTWISE = {
    "Add": elementwise_rule(_add, exactness=exact_sum_of, scale=_summands),
    "Sub": elementwise_rule(_add, exactness=exact_sum_of, scale=_summands),
    "Mul": elementwise_rule(_mul, exactness=exact_product_of), "Div": elementwise_rule(_div, exactness=exact_quotient_of),
    "Reciprocal": elementwise_rule(lambda ctx, b: _div_by(ctx, b)),
    "Sin": elementwise_rule(_lipschitz(1.0)), "Cos": elementwise_rule(_lipschitz(1.0)),
    "Relu": elementwise_rule(lambda ctx, b: _relu(ctx, b), None), "Abs": elementwise_rule(_lipschitz(1.0), None),
    "Neg": elementwise_rule(_lipschitz(1.0), None), "LeakyRelu": elementwise_rule(_leaky),
    "Max": elementwise_rule(_widest, None), "Min": elementwise_rule(_widest, None), "Clip": elementwise_rule(_clip, None),
    "Floor": elementwise_rule(_jump(np.floor), None), "Ceil": elementwise_rule(_jump(np.ceil), None),
    "Round": elementwise_rule(_jump(np.round), None), "Sign": elementwise_rule(_jump(np.sign), None),
    "Cast": elementwise_rule(_cast, exactness=representable), "CastLike": elementwise_rule(_cast, exactness=representable),
    "Less": elementwise_rule(_comparison, None), "Greater": elementwise_rule(_comparison, None),
    "LessOrEqual": elementwise_rule(_comparison, None), "GreaterOrEqual": elementwise_rule(_comparison, None),
    "Equal": elementwise_rule(_comparison, None), "Not": elementwise_rule(_lipschitz(1.0), None),
    "And": elementwise_rule(_widest, None), "Or": elementwise_rule(_widest, None), "Xor": elementwise_rule(_widest, None),
    "Where": elementwise_rule(_where, None),
    # two roundings before the clamp (HardSwish: three, with the product), each within u of the scale
    "HardSigmoid": elementwise_rule(_hard_sigmoid, 1.0, scale=_hard_scale),
    "HardSwish": elementwise_rule(_hard_swish, 1.5, scale=_hard_scale),
}


def _div_by(ctx, b):
    width = width_of(b[0])
    x = np.abs(ctx.r(0))
    room = x - width_of(ctx.reach(0, b[0]))
    return np.where(room > 0, width / np.where(room > 0, x * room, 1.0), np.inf)


def _integer_or(rule, integer_rule):
    """Integer outputs: exact arithmetic (no rounding), overflow checked by finish()."""
    def dispatch(ctx):
        dtype = ctx.out_dtypes[0] if ctx.out_dtypes else None
        if dtype is not None and dtype.kind in "iub":
            return integer_rule(ctx)
        return rule(ctx)
    return dispatch


for _name in ("Add", "Sub", "Mul"):
    ELEMENTWISE[_name] = _integer_or(ELEMENTWISE[_name], elementwise_rule({"Add": _add, "Sub": _add, "Mul": _mul}[_name],
                                                                      None))
ELEMENTWISE["Div"] = _integer_or(ELEMENTWISE["Div"], elementwise_rule(_integer_exact, None))
