"""models/ imports form a DAG at module level: no package module imports another inside a
function (which is how import cycles hide), and the module-level graph has no cycle. A size
(``models.ladder.model_config``) is applied above the config, so the config imports nothing
but ``models.values``."""

from __future__ import annotations

import ast
from pathlib import Path

MODELS = Path(__file__).resolve().parents[1] / "models"


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _models_targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.ImportFrom):
        names = [node.module or ""]
    else:
        names = [a.name for a in node.names]
    return [n for n in names if n == "models" or n.startswith("models.")]


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    """Module-level edges between models.* modules, and every function-level models import."""
    edges: dict[str, set[str]] = {}
    nested: list[str] = []
    for path in sorted(MODELS.glob("*.py")):
        name = "models" if path.stem == "__init__" else f"models.{path.stem}"
        tree = ast.parse(path.read_text())
        edges[name] = set()
        for stmt in tree.body:
            # annotation-only imports count too: they are the same cycle to a reader
            body = stmt.body if isinstance(stmt, ast.If) and _is_type_checking(stmt) else [stmt]
            for inner in body:
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    edges[name].update(_models_targets(inner))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)) and _models_targets(inner):
                        nested.append(f"{name}.{node.name}: {_models_targets(inner)}")
        del tree
    return edges, nested


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt] if nxt in path else [*path, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_function_level_imports_of_models_modules():
    _, nested = _graph()
    assert nested == []


def test_module_level_import_graph_is_acyclic():
    edges, _ = _graph()
    assert "models.config" in edges["models.ladder"]  # the ladder builds configs, not the reverse
    assert _find_cycle({k: v - {"models"} for k, v in edges.items()}) is None


def test_cycle_finder_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_config_sits_below_accounting_and_the_ladder():
    edges, _ = _graph()
    assert edges["models.config"] <= {"models.values"}  # plain data: no ladder, no accounting
    assert edges["models.accounting"] == {"models.config"}
    assert edges["models.ladder"] == {"models.accounting", "models.config"}
    assert "models.block" in edges["models.registry"]
    assert "models.registry" not in edges["models.block"]
