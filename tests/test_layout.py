"""The package's layout as docs/architecture.md describes it: no import circles between modules
(a module never imports, at any depth of the import graph, a module that imports it back), no
source file over 500 lines, and every folder of the tree named in architecture.md."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "susurrus"
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str], typing: bool = False) -> set[str]:
    """The project's modules that ``path`` imports, at module level or inside functions (for
    type checkers only too where ``typing``); a package
    import (``from susurrus.cli import main``) counts as importing the named submodule where one exists."""
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    # imports for type checkers only (``if TYPE_CHECKING:``) never run: they make no circle
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    own = _module_name(path) if path.is_relative_to(ROOT) else path.stem
    return {m for m in found if m in modules and m != own and not own.startswith(m + ".")}


def import_graph(typing: bool = False) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    # a package's __init__ runs when a submodule is imported; only count what the files name
    return {name: _imports(path, modules, typing) for name, path in files.items()}


# the pipeline's order (docs/architecture.md), lowest first: a module reaches, at any depth of
# the import graph, lazily or for type checkers only, nothing in a layer above its own
LAYERS = (
    ("audio", "model", "decoding", "streaming"),  # the engine: samples in, a stream's events out
    ("speakers",),  # layers that consume a stream's events (labels wrap a stream from above)
    ("api", "server", "cli"),  # where users meet it
)


def _layer(module: str) -> int | None:
    part = module.split(".")[1] if module.count(".") else ""
    return next((i for i, names in enumerate(LAYERS) if part in names), None)


def _reached(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` reaches, each with the module that imports it on the way."""
    seen: dict[str, str] = {}
    todo = [start]
    while todo:
        v = todo.pop()
        for w in graph[v]:
            if w not in seen and w != start:
                seen[w] = v
                todo.append(w)
    return seen


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_a_module_that_imports_it_back():
    assert _cycles(import_graph()) == []


def test_no_layer_imports_a_layer_above_it():
    graph = import_graph(typing=True)
    wrong = []
    for module in sorted(graph):
        own = _layer(module)
        if own is None:
            continue
        for reached, via in _reached(graph, module).items():
            if (above := _layer(reached)) is not None and above > own:
                wrong.append(f"{module} reaches {reached} (imported by {via})")
    assert wrong == []


def test_the_layer_check_sees_a_lazy_upward_import(tmp_path):
    """The check itself: a function-level import of ``speakers/`` from ``streaming/`` is found."""
    f = tmp_path / "mod.py"
    f.write_text("def f():\n    from susurrus.speakers.stream import LabelledStream\n")
    assert _imports(f, {"susurrus.speakers.stream"}) == {"susurrus.speakers.stream"}
    graph = {"susurrus.streaming.x": {"susurrus.streaming.y"}, "susurrus.streaming.y": {"susurrus.speakers.stream"},
             "susurrus.speakers.stream": set()}
    assert _reached(graph, "susurrus.streaming.x") == {"susurrus.streaming.y": "susurrus.streaming.x",
                                                       "susurrus.speakers.stream": "susurrus.streaming.y"}
    assert _layer("susurrus.speakers.stream") > _layer("susurrus.streaming.y")


def test_no_source_file_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in [*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_architecture_names_every_folder_of_the_package():
    text = (ROOT / "docs" / "architecture.md").read_text()
    folders = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*") if p.is_dir()
                     and p.name != "__pycache__")
    # the tree in "Where things are" nests folders, so a folder is named by its own name and a slash
    missing = [f for f in folders if f"{Path(f).name}/" not in text]
    assert missing == []
