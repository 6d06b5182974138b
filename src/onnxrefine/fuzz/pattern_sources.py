"""Sources for the targeted builders (fuzz/patterns.py): a pool value of a suitable kind, or a
fresh graph input when the pool has none."""

from __future__ import annotations

from onnxrefine.fuzz.graphbuilder import (
    F16, F32, MAX_NUMEL, Dim, GraphBuilder, Value, numel,
)


# --- sources ----------------------------------------------------------------------------------

def source(g: GraphBuilder, accept, make_dims, dtypes=(F32,)) -> Value:
    """A pool value `accept` takes (half the time), else a fresh graph input."""
    found = g.pick(accept) if g.chance(0.5) else None
    if found is not None:
        return found
    return g.add_input(g.choice(dtypes), make_dims(g))


def image_dims(g: GraphBuilder, rank: int = 4, min_spatial: int = 3) -> tuple[Dim, ...]:
    batch = g.symbol("N") if g.chance(0.4) else Dim.static(g.randint(1, 2))
    spatial = [Dim.static(g.randint(min_spatial, 7)) for _ in range(rank - 2)]
    if g.chance(0.15):
        spatial[-1] = g.symbol("L", 3, 6)
    return (batch, Dim.static(g.randint(1, 4)), *spatial)


def image(g: GraphBuilder, dtypes=(F32, F32, F16), min_spatial: int = 3) -> Value:
    def fits(v: Value) -> bool:
        return (v.dtype in dtypes and v.rank in (3, 4) and v.dims[1].is_static
                and all(d.size >= min_spatial for d in v.dims[2:]) and v.numel <= MAX_NUMEL // 4)
    return source(g, fits, lambda g: image_dims(g, g.choice([4, 4, 3]), min_spatial), dtypes)


def any_dims(g: GraphBuilder) -> tuple[Dim, ...]:
    rank = g.randint(1, 4)
    dims = [Dim.static(g.choice([1, 2, 3, 4, 6])) for _ in range(rank)]
    if rank >= 2 and g.chance(0.4):
        dims[0] = g.symbol("N")
    return tuple(dims)


def tensor(g: GraphBuilder, dtypes=(F32,), min_rank: int = 1, max_rank: int = 6) -> Value:
    def fits(v: Value) -> bool:
        return v.dtype in dtypes and min_rank <= v.rank <= max_rank and v.numel <= MAX_NUMEL // 4
    def dims(g):
        d = any_dims(g)
        while len(d) < min_rank:
            d = d + (Dim.static(g.randint(1, 4)),)
        return d[:max_rank]
    return source(g, fits, dims, dtypes)


def matrix(g: GraphBuilder, dtypes=(F32,)) -> Value:
    def fits(v: Value) -> bool:
        return v.dtype in dtypes and v.rank == 2 and v.dims[1].is_static
    return source(g, fits, lambda g: (g.symbol("N") if g.chance(0.4) else Dim.static(g.randint(1, 5)),
                                      Dim.static(g.randint(1, 8))), dtypes)
