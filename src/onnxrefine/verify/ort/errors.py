"""What went wrong when onnxruntime cannot load or run a model, and whose limit it is.

onnxruntime's messages carry a status code, C++ source locations and signatures; the user needs
to know which model failed (original or candidate), at which stage (load or run), and whether the
model is at fault (invalid graph, inputs that do not fit) or the tool is (onnxruntime lacks a
kernel, an opset or IR version is newer than it supports, protobuf's 2 GB message limit, memory).
"""

from __future__ import annotations

import re

_STATUS = re.compile(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*([A-Z_]+)\s*:\s*")
# "/onnxruntime_src/.../reshape_helper.h:91 onnxruntime::ReshapeHelper::ReshapeHelper(const ...&, bool) "
_SOURCE = re.compile(r"\S+\.(?:h|cc|cpp|hpp):\d+ [^()]*\([^()]*\)\s*(?:const\s*)?")
_NO_KERNEL = re.compile(r"Could not find an implementation for (\S+?)\((\d+)\) node with name '([^']*)'")
_UNREGISTERED = re.compile(r"(?:(\S+):)?(\w+)\((-?\d+)\) is not a registered function/op")
_NO_OP = re.compile(r"No Op registered for (\w+) with domain_version of (\d+)")
_OPSET = re.compile(r"Opset (\d+) is under development.*?support for domain (\S+) is till opset (\d+)", re.S)
_IR = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")
_PROTOBUF = re.compile(r"exceeds maximum protobuf size|Failed to serialize proto|larger than the 2 ?GB", re.I)
_MEMORY = re.compile(r"bad_alloc|Failed to allocate memory|out of memory|MemoryError", re.I)
_NODE = re.compile(r"Non-zero status code returned while running (\S+) node\. Name:'([^']*)' Status Message: (.*)",
                   re.S)


def _ort_version() -> str:
    try:
        import onnxruntime

        return f"onnxruntime {onnxruntime.__version__}"
    except Exception:  # pragma: no cover - onnxruntime is a dependency
        return "onnxruntime"


def _onnx_defines(op: str, version: int, domain: str) -> bool:
    try:
        import onnx.defs

        return onnx.defs.has(op, version, domain)
    except Exception:
        return False


def _onnx_max_opset() -> int | None:
    try:
        import onnx.defs

        return onnx.defs.onnx_opset_version()
    except Exception:
        return None


def clean(text: str) -> str:
    """The message without onnxruntime's status prefix and C++ source locations, on one line."""
    text = _STATUS.sub("", text.strip())
    text = _SOURCE.sub("", text)
    text = text.replace("This is an invalid model. ", "")
    return " ".join(text.split())[:300]


def describe(exc: BaseException, action: str, role: str) -> str:
    """One line: what failed (`action` 'load' or 'run' of the `role`, e.g. 'candidate model'),
    why, and whose limit it is."""
    raw = str(exc).strip() or type(exc).__name__
    status = (_STATUS.match(raw) or [None, ""])[1]
    message = clean(raw)
    ort = _ort_version()
    verb = "cannot load" if action == "load" else "failed to run"
    head = f"onnxruntime {verb} the {role}"
    tool_limit = f"a limit of onnxruntime, not an error in the {role}"

    if _PROTOBUF.search(raw):
        return (f"{head}: the model is over 2 GB as one serialized protobuf message, protobuf's size "
                f"limit (a limit of how the model is handed to onnxruntime, not an error in the {role}; "
                "store the weights as external data)")
    if isinstance(exc, MemoryError) or _MEMORY.search(raw):
        return f"{head}: out of memory ({message}); a limit of this machine, not an error in the {role}"
    match = _NO_KERNEL.search(raw)
    if match:
        op, version, node = match.groups()
        where = f" (node '{node}')" if node else ""
        return (f"{head}: {ort} has no CPU kernel for {op} (opset {version}) with these input "
                f"types{where}; {tool_limit}")
    match = _UNREGISTERED.search(raw)
    if match:
        domain, op, _ = match.groups()
        return (f"{head}: {ort} knows no op {op} in domain {domain or 'ai.onnx'}; a custom op needs "
                f"its kernel library loaded into onnxruntime (a limit of this onnxruntime set-up, "
                f"not necessarily an error in the {role})")
    match = _NO_OP.search(raw)
    if match:
        op, version = match.group(1), int(match.group(2))
        if _onnx_defines(op, version, ""):
            return f"{head}: {ort} does not implement {op} at opset {version}; {tool_limit}"
        return f"{head}: ONNX has no op {op} at opset {version}; the {role} is invalid"
    match = _OPSET.search(raw)
    if match:
        version, domain, supported = match.groups()
        head = f"{head}: the {role} uses opset {version} of {domain}; {ort} supports up to opset {supported}"
        known = _onnx_max_opset()
        if known is not None and int(version) > known:
            return f"{head}, and no ONNX release installed here defines it (onnx knows up to {known})"
        return f"{head}; {tool_limit}"
    match = _IR.search(raw)
    if match:
        version, supported = match.groups()
        return (f"{head}: the {role} has IR version {version}; {ort} reads up to IR version "
                f"{supported}; {tool_limit}")
    if action == "load" and (status in ("INVALID_GRAPH", "INVALID_PROTOBUF")
                             or "ShapeInferenceError" in raw or "Type Error" in raw):
        return f"{head}: the {role} is invalid: {message}"
    if action == "run":
        match = _NODE.search(message)
        if match:
            op, node, detail = match.groups()
            name = f"'{node}' " if node else ""
            return f"{head}: node {name}({op}) failed: {detail.strip()}"
        if status == "INVALID_ARGUMENT" or isinstance(exc, ValueError):
            return f"{head}: the inputs do not fit it: {message}"
    return f"{head}: {message}"
