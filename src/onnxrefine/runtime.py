"""Importing onnxruntime so that Ctrl-C stays Ctrl-C.

onnxruntime's native module is initialised by pybind11, which turns any Python exception raised
during the initialisation into `ImportError: initialization failed` (the original as its cause).
A Ctrl-C that lands there, a few hundred milliseconds into a run, became an ImportError; the
first code to need onnxruntime (a certificate's session, a fold) caught it as "onnxruntime
cannot run this", refused one rewrite, and the run went on to exit 0 with a different model
(tests/test_interrupt.py saw it on CI). Every module that needs onnxruntime gets it from
`require_onnxruntime`, where an interrupted import is re-raised as what it was; onnxruntime is
still imported only when first needed (a run without verification or certificates never does).
"""

from __future__ import annotations


def interrupted(exc: BaseException) -> bool:
    """Whether `exc` or anything in its cause/context chain is a KeyboardInterrupt."""
    return interruption(exc) is not None


def interruption(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt in `exc`'s cause/context chain (a SIGTERM's too: cli/main.py raises a
    subclass for it, which must stay what it is to exit 143), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def require_onnxruntime():
    """Import onnxruntime (once; later imports find it loaded) and return the module. An import
    interrupted by Ctrl-C raises KeyboardInterrupt; any other failure raises as onnxruntime did."""
    try:
        import onnxruntime
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt) and interrupted(exc):
            raise interruption(exc) from None
        if out_of_memory(exc):
            from onnxrefine.errors import BadInputError

            limit = address_space_limit()
            raise BadInputError("not enough memory to load onnxruntime" + (f" (address-space limit {limit})"
                                if limit else "") + f": {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        raise
    return onnxruntime


# onnxruntime's session option that turns weight prepacking off: every run that stands for the
# model's own arithmetic (strict verification runs, certificates, constant folds) sets it, so a
# MatMul or Conv sums alike whether its weight is an initializer or computed
# (verify/ort/settings.py says why).
DISABLE_PREPACKING = "session.disable_prepacking"


def strict_session(model_bytes: bytes):
    """An onnxruntime session over a serialized model without graph optimizations or weight
    prepacking, on one thread, sequential and quiet (failures come back as exceptions): how a check
    runs a small model (verify/ort/settings.py says why strict runs do not prepack)."""
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry(DISABLE_PREPACKING, "1")
    options.log_severity_level = 4
    return ort.InferenceSession(model_bytes, sess_options=options, providers=["CPUExecutionProvider"])


def out_of_memory(exc: BaseException) -> bool:
    """Whether an import failed for want of memory: a MemoryError, or the dynamic loader's 'failed to
    map segment' / 'cannot allocate memory' for a native extension under an address-space limit."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, ImportError) and ("failed to map segment" in text or "cannot allocate memory" in text)


def address_space_limit() -> str | None:
    """The process's address-space limit (`ulimit -v`, `prlimit --as`) as text, or None when there
    is none (or the platform cannot say)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    return f"{soft / (1 << 20):.0f} MiB"
