"""The package's layout (issue 26): ``nodeup/__init__.py`` only re-exports,
and no module imports, at the top or inside a function, a module that
imports it back (the API lives in private modules, as Ray's
``ray/_private/worker.py``)."""

import ast
import os

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "nodeup")


def _modules():
    """{dotted module name: path} of every module of the package."""
    out = {}
    for root, _, files in os.walk(PKG):
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(root, f), os.path.dirname(PKG))[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = os.path.join(root, f)
    return out


def _imports(name, path, modules):
    """The package modules that module ``name`` imports anywhere in its code."""
    is_pkg = path.endswith("__init__.py")
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "nodeup"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[:len(base) - (node.level - 1)]
                target = ".".join(parent + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "nodeup":
                continue
            for a in node.names:  # `from . import _x` imports the module _x
                sub = f"{target}.{a.name}"
                out.add(sub if sub in modules else target)
    out.discard(name)
    return {m for m in out if m in modules}


def test_no_import_cycle():
    modules = _modules()
    graph = {m: _imports(m, p, modules) for m, p in modules.items()}
    state = {}

    def visit(m, path):
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                cycle = path[path.index(d):] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_init_only_reexports():
    tree = ast.parse(open(os.path.join(PKG, "__init__.py")).read())
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__all__"]:
            continue
        raise AssertionError(f"nodeup/__init__.py line {node.lineno}: {type(node).__name__} is not a re-export")
