"""Contractions: MatMul, Gemm (and Einsum's element type)."""

from __future__ import annotations

from onnxrefine.ir.facts.core import Site, broadcast_shapes, dtype_rule, shape_rule


@dtype_rule("MatMul Gemm Einsum")
def same_dtype(site: Site):
    return site.dtype(0)


@shape_rule("MatMul")
def matmul_rule(site: Site):
    return matmul_shape(site.shape(0), site.shape(1))


def matmul_shape(a, b) -> tuple | None:
    if a is None or b is None or not a or not b:
        return None
    a_rows = a if len(a) > 1 else (1,) + tuple(a)
    b_cols = b if len(b) > 1 else tuple(b) + (1,)
    batch = broadcast_shapes([a_rows[:-2], b_cols[:-2]])
    if batch is None:
        return None
    dims = batch + (a_rows[-2], b_cols[-1])
    if len(a) == 1:
        dims = dims[:-2] + dims[-1:]
    if len(b) == 1:
        dims = dims[:-1]
    return dims


@shape_rule("Gemm")
def gemm_shape(site: Site):
    a, b = site.shape(0), site.shape(1)
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return None
    m = a[1] if site.attr("transA", 0) else a[0]
    n = b[0] if site.attr("transB", 0) else b[1]
    return (m, n)
