"""The package's structure, checked on every import statement in src/ (function-level ones included):

- layers: every top-level module and package has its place in LAYERS (lowest first) and imports
  only what lies below it; the verifier lies below the rewrite engine and the passes, so it judges a
  rewrite without sharing the code that made it (the one crossing: the certificate code reads the
  rule engine's hook types);
- no import circle between any two modules;
- across verify/'s subpackages only faces: code outside judge/, ort/, reference/, ... imports the
  names a subpackage's __init__ exports, never one of its modules;
- no module imports another module's _private name;
- no private attribute of another object is read (onnx's and onnx-ir's above all: a release may
  drop it) except the few listed in PRIVATE_READS, each with its reason;
- passes/ and rewrite/ edit graphs only through ir/edit.py: no call of onnx-ir's graph mutators
  (a graph's node list, initializers, inputs, outputs) there;
- no module is over 500 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "onnxrefine"

# Lowest first; a layer imports only layers before it. "__init__" is the package root (its face).
LAYERS = ["errors", "version", "runtime", "portable", "progress", "_deferred", "atomic", "resources", "input_shapes", "ir",
          "plain", "verify", "rewrite", "passes", "verified", "around_maps", "api", "triage", "fuzz", "batch", "cli",
          "__main__", "__init__"]
# The one crossing: verify/certificate/certifier.py implements the rule engine's certificate hook, so
# it reads the hook's request/outcome types (and the EXACT class name) from rewrite/rule.py.
ALLOWED = {("verify/certificate/certifier.py", "onnxrefine.rewrite.rule"): {"EXACT", "CertificateOutcome",
                                                                             "CertificateRequest"},
           ("verify/certificate/model.py", "onnxrefine.rewrite.rule"): {"EXACT", "CertificateRequest"},
           # The command reads the package root's record of a start-up that could not load the native
           # libraries, before it imports anything that needs them.
           ("cli/main.py", "onnxrefine.STARTUP_FAILURE"): set(),
           # The command loads the native libraries through the package root in its worker, after
           # the supervisor's fork (the root defers them in the command's process).
           ("__main__.py", "onnxrefine.load_native"): set()}
MAX_LINES = 500
# (module, private name) -> why it is read. A name of onnx or onnx-ir is read only where no public
# one exists, and behind a feature check (the reading module falls back where it is gone).
PRIVATE_READS = {
    ("ir/edit.py", "_uses"): "onnx-ir has no use count; its public uses() copies the use list on every "
                             "call (quadratic on long chains); falls back to uses() where `_uses` changes",
    ("ir/protoview.py", "_core"): "onnx-ir exports no tensor base class; the public name is taken first",
    ("verify/reference/evaluator.py", "_op_list"): "onnx.reference has no public per-operator lookup; "
                                                   "where the module moved, nothing falls back to it",
    ("__main__.py", "_exit"): "os._exit is os's documented exit without clean-up",
    ("__main__.py", "_run_exitfuncs"): "atexit has no public way to run its handlers early; where it is "
                                       "missing the interpreter tears down as usual",
    ("ir/contained.py", "_exit"): "os._exit is os's documented exit without clean-up",
    # The package's own objects: a module's helper reading its own class, or a memo kept on a context.
    ("ir/protoview.py", "_inner"): "the module's own tensor class",
    ("fuzz/patterns.py", "_scopes"): "the fuzz graph builder's current scope, for a pattern that plants a node",
    ("ir/signed_zero.py", "_signed_zero_analysis"): "a memo kept on the rule context for one driver run",
    ("passes/folding.py", "_fold_refused"): "a memo kept on the pass context for one pass run",
    ("verify/localize/layerwise.py", "_cached"): "the localizer's cache, dropped after its last input set",
    ("verify/reference/kernels/resize.py", "_run_fallback"): "the evaluator's onnx.reference fallback",
    ("verify/reference/kernels/tensor.py", "_run_fallback"): "the evaluator's onnx.reference fallback",
}


def imports_of(source: str) -> list[tuple[str, set[str], int]]:
    """(module, names imported from it, line) for every onnxrefine import in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = {alias.name for alias in node.names}
            if node.module == "onnxrefine":  # `from onnxrefine import resources`
                found += [(f"onnxrefine.{name}", set(), node.lineno) for name in sorted(names)]
            elif node.module.startswith("onnxrefine."):
                found.append((node.module, names, node.lineno))
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append(("(relative)", set(), node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, set(), node.lineno) for alias in node.names if alias.name.startswith("onnxrefine")]
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_face" and len(node.args) == 2
              and isinstance(node.args[1], ast.Dict)):  # a face's names, imported on first use (_deferred.py)
            for key, value in zip(node.args[1].keys, node.args[1].values):
                names = {element.value for element in getattr(value, "elts", [])}
                found.append((key.value, names, key.lineno))
    return found


def _modules(src: Path) -> dict[str, Path]:
    """Dotted module name -> file (a package by its __init__.py)."""
    modules = {}
    for path in src.rglob("*.py"):
        parts = [src.name, *path.relative_to(src).with_suffix("").parts]
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _layer(src: Path, path: Path) -> str:
    parts = path.relative_to(src).parts
    return parts[0] if len(parts) > 1 else path.stem


def _top_level(src: Path) -> set[str]:
    return {path.stem for path in src.glob("*.py")} | {path.parent.name for path in src.glob("*/__init__.py")}


def layer_violations(src: Path = SRC) -> list[str]:
    bad = [f"top-level module {name} has no place in LAYERS" for name in sorted(_top_level(src) - set(LAYERS))]
    rank = {name: index for index, name in enumerate(LAYERS)}
    for path in sorted(src.rglob("*.py")):
        layer, rel = _layer(src, path), path.relative_to(src).as_posix()
        for module, names, line in imports_of(path.read_text()):
            if module == "(relative)":
                bad.append(f"{rel}:{line}: relative import (the layer check reads absolute ones)")
                continue
            parts = module.split(".")
            target = parts[1] if len(parts) > 1 else "__init__"
            if target not in rank:  # `from onnxrefine import __version__`: a name of the root
                target = "__init__"
            if target == layer or layer not in rank:
                continue
            allowed = ALLOWED.get((rel, module))
            if rank[target] > rank[layer] and (allowed is None or not names <= allowed):
                bad.append(f"{rel}:{line}: {layer} imports {module} {sorted(names)}")
    return bad


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the modules it imports (`from package import name` is the module package.name
    where there is one, else the package's __init__)."""
    modules = _modules(src)
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for module, names, _ in imports_of(path.read_text()):
            targets = [f"{module}.{n}" if f"{module}.{n}" in modules else module for n in names] or [module]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def face_violations(src: Path = SRC) -> list[str]:
    """Imports of a verify/ subpackage's module (or of a module through its face) from outside it."""
    modules = _modules(src)
    faces = sorted(f"{src.name}.verify.{path.parent.name}" for path in (src / "verify").glob("*/__init__.py"))
    bad = []
    for name, path in sorted(modules.items()):
        for module, names, line in imports_of(path.read_text()):
            for face in faces:
                if name == face or name.startswith(face + "."):
                    continue
                through_face = module == face and any(f"{face}.{n}" in modules for n in names)
                if module.startswith(face + ".") or through_face:
                    bad.append(f"{path.relative_to(src).as_posix()}:{line}: {module} {sorted(names)} "
                               f"(import from the face, {face})")
    return bad


def private_imports(src: Path = SRC) -> list[str]:
    bad = []
    for path in sorted(src.rglob("*.py")):
        for module, names, line in imports_of(path.read_text()):
            private = sorted(n for n in names if n.startswith("_") and not n.startswith("__"))
            if private:
                bad.append(f"{path.relative_to(src).as_posix()}:{line}: {module} {private}")
    return bad


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reads_of(source: str) -> list[tuple[str, int]]:
    """(private name, line) for every private attribute read off an object other than self/cls:
    `x._name`, getattr/hasattr/setattr(x, "_name"), and imports of another package's private module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((node.attr, node.lineno))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _is_private(node.args[1].value)):
            found.append((node.args[1].value, node.lineno))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            for module in modules:
                if not module.startswith("onnxrefine"):
                    found += [(part, node.lineno) for part in module.split(".") if _is_private(part)]
    return sorted(found, key=lambda item: item[1])


def private_reads(src: Path = SRC, allowed: dict | None = None) -> list[str]:
    allowed = PRIVATE_READS if allowed is None else allowed
    bad = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        bad += [f"{rel}:{line}: reads {name}" for name, line in private_reads_of(path.read_text())
                if (rel, name) not in allowed]
    return bad


# onnx-ir's graph mutators: methods only a Graph has, the list methods on a graph (a name or an
# attribute spelling a graph), and any change to a graph's inputs, outputs or initializers (a node's
# are tuples, so a change there is a graph's).
GRAPH_ONLY_METHODS = {"insert_before", "insert_after", "register_initializer"}
LIST_METHODS = {"append", "extend", "insert", "pop", "remove", "clear", "sort"}
GRAPH_PARTS = {"inputs", "outputs", "initializers"}
EDITORS = ("passes", "rewrite")


def _graphish(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.lower().endswith(("graph", "branch", "body"))


def graph_mutations_of(source: str) -> list[tuple[str, int]]:
    """(what, line) for every direct onnx-ir graph edit in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, receiver = node.func.attr, node.func.value
            part = receiver.attr if isinstance(receiver, ast.Attribute) and receiver.attr in GRAPH_PARTS else None
            if method in GRAPH_ONLY_METHODS or (method in LIST_METHODS and (part or _graphish(receiver))):
                found.append((f"{part + '.' if part else ''}{method}()", node.lineno))
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        for target in targets:
            if (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute)
                    and target.value.attr in GRAPH_PARTS):
                found.append((f"{target.value.attr}[...] =", node.lineno))
    return sorted(found, key=lambda item: item[1])


def graph_edits_outside_edit(src: Path = SRC) -> list[str]:
    bad = []
    for folder in EDITORS:
        for path in sorted((src / folder).rglob("*.py")):
            rel = path.relative_to(src).as_posix()
            bad += [f"{rel}:{line}: {what} (edit through ir/edit.py)" for what, line in graph_mutations_of(path.read_text())]
    return bad


def long_modules(src: Path = SRC) -> list[str]:
    return [f"{path.relative_to(src).as_posix()}: {count} lines" for path in sorted(src.rglob("*.py"))
            if (count := len(path.read_text().splitlines())) > MAX_LINES]


def test_layers_import_only_downwards():
    assert not layer_violations(), "\n".join(layer_violations())


def test_no_import_circle():
    found = circles(import_graph())
    assert not found, "\n".join(" <-> ".join(group) for group in found)


def test_verify_subpackages_are_imported_through_their_faces():
    assert not face_violations(), "\n".join(face_violations())


def test_no_module_imports_another_modules_private_name():
    assert not private_imports(), "\n".join(private_imports())


def test_no_private_attribute_is_read_but_the_listed_ones():
    assert not private_reads(), "\n".join(private_reads())
    stale = sorted(key for key in PRIVATE_READS
                   if key[1] not in {name for name, _ in private_reads_of((SRC / key[0]).read_text())})
    assert not stale, f"PRIVATE_READS lists reads that are gone: {stale}"


def test_passes_and_the_rule_engine_edit_graphs_only_through_ir_edit():
    assert not graph_edits_outside_edit(), "\n".join(graph_edits_outside_edit())


def test_no_module_is_over_500_lines():
    assert not long_modules(), "\n".join(long_modules())


# -- the checks can fail ----------------------------------------------------------------------------

@pytest.mark.parametrize(("source", "expected"), [
    ("def f():\n    from onnxrefine.passes import registry\n", ["onnxrefine.passes"]),
    ("import onnxrefine.cli.main\n", ["onnxrefine.cli.main"]),
    ("from onnxrefine import verified\n", ["onnxrefine.verified"]),
    ("from . import x\n", ["(relative)"]),
    ("import os\nfrom onnx import helper\n", []),
    ("__getattr__ = lazy_face(globals(), {'onnxrefine.verify.judge': ('Verdict',)})\n", ["onnxrefine.verify.judge"]),
])
def test_the_scan_sees_every_kind_of_import(source, expected):
    """Imports inside functions, plain `import`, `from onnxrefine import x`."""
    assert [module for module, _, _ in imports_of(source)] == expected


def _fake(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "onnxrefine"
    for rel in [*files, "__init__.py", "verify/__init__.py"]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(files.get(rel, ""))
    return root


def test_a_forbidden_import_and_an_unplaced_module_are_reported(tmp_path):
    src = _fake(tmp_path, {
        "verify/bad.py": "def f():\n    from onnxrefine.passes.registry import all_passes\n",
        "verify/certificate/__init__.py": "",
        "verify/certificate/certifier.py": "from onnxrefine.rewrite.rule import EXACT, Rule\n",
        "verify/certificate/model.py": "from onnxrefine.rewrite.rule import EXACT\n",
        "passes/registry.py": "", "rewrite/rule.py": "",
        "stray.py": "",
    })
    assert layer_violations(src) == [
        "top-level module stray has no place in LAYERS",
        "verify/bad.py:2: verify imports onnxrefine.passes.registry ['all_passes']",
        "verify/certificate/certifier.py:1: verify imports onnxrefine.rewrite.rule ['EXACT', 'Rule']",
    ]


def test_a_circle_is_found_through_a_function_level_import(tmp_path):
    src = _fake(tmp_path, {"ir/__init__.py": "", "ir/a.py": "from onnxrefine.ir import b\n",
                           "ir/b.py": "def f():\n    from onnxrefine.ir.a import x\n", "ir/c.py": "from onnxrefine.ir import a\n"})
    assert circles(import_graph(src)) == [["onnxrefine.ir.a", "onnxrefine.ir.b"]]


def test_a_module_reached_past_its_face_is_reported(tmp_path):
    src = _fake(tmp_path, {"verify/judge/__init__.py": "from onnxrefine.verify.judge.verdict import EXACT\n",
                           "verify/judge/verdict.py": "EXACT = 'exact'\n",
                           "verify/judge/rules.py": "from onnxrefine.verify.judge.verdict import EXACT\n",
                           "verify/session.py": "from onnxrefine.verify.judge import EXACT\n"
                                                "from onnxrefine.verify.judge import verdict\n"
                                                "from onnxrefine.verify.judge.verdict import EXACT\n"})
    assert face_violations(src) == [
        "verify/session.py:2: onnxrefine.verify.judge ['verdict'] (import from the face, onnxrefine.verify.judge)",
        "verify/session.py:3: onnxrefine.verify.judge.verdict ['EXACT'] (import from the face, onnxrefine.verify.judge)",
    ]


def test_a_private_import_and_a_long_module_are_reported(tmp_path):
    src = _fake(tmp_path, {"a.py": "from onnxrefine.b import _hidden, __version__, shown\n",
                           "b.py": "x = 1\n" * (MAX_LINES + 1)})
    assert private_imports(src) == ["a.py:1: onnxrefine.b ['_hidden']"]
    assert long_modules(src) == [f"b.py: {MAX_LINES + 1} lines"]


def test_a_private_read_is_reported_however_it_is_spelled(tmp_path):
    src = _fake(tmp_path, {"a.py": "def f(value, tensor):\n"
                                   "    self._ok, cls._ok, value.__class__\n"
                                   "    n = len(value._uses)\n"
                                   "    m = getattr(tensor, '_inner', None)\n"
                                   "    from onnx.reference.ops._op_list import load_op\n"
                                   "    import onnx_ir._core\n"})
    assert private_reads(src, allowed={}) == ["a.py:3: reads _uses", "a.py:4: reads _inner",
                                              "a.py:5: reads _op_list", "a.py:6: reads _core"]
    assert private_reads(src, allowed={("a.py", "_uses"): "", ("a.py", "_inner"): "", ("a.py", "_op_list"): "",
                                       ("a.py", "_core"): ""}) == []


def test_a_direct_graph_edit_is_reported_however_it_is_spelled(tmp_path):
    src = _fake(tmp_path, {"passes/__init__.py": "", "rewrite/__init__.py": "",
                           "passes/p.py": "def f(graph, node, value, names):\n"
                                          "    graph.remove(node, safe=True)\n"
                                          "    value.graph.initializers.pop(value.name)\n"
                                          "    node.graph.insert_before(node, [node])\n"
                                          "    graph.outputs[0] = value\n"
                                          "    names.append(node.name)\n"
                                          "    branch.append(node)\n",
                           "rewrite/d.py": "def g(root, graph):\n    graph.outputs.clear()\n"})
    assert graph_edits_outside_edit(src) == [
        "passes/p.py:2: remove() (edit through ir/edit.py)",
        "passes/p.py:3: initializers.pop() (edit through ir/edit.py)",
        "passes/p.py:4: insert_before() (edit through ir/edit.py)",
        "passes/p.py:5: outputs[...] = (edit through ir/edit.py)",
        "passes/p.py:7: append() (edit through ir/edit.py)",
        "rewrite/d.py:2: outputs.clear() (edit through ir/edit.py)",
    ]
