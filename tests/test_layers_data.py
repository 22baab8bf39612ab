"""Layer rules, read from the source with `ast` (every import, lazy ones inside functions included).

- `ulorl/algo/` is pure tensor code: it imports nothing of the package outside `ulorl.algo`
  (no config objects, no rollout, reward, evaluation or data).
- `ulorl/data/` (loaders, validation, formats, records, its config) is a leaf under the engines: it
  imports only itself, `ulorl.tasks` (the built-in dataset) and `ulorl.errors`; never rollout, reward,
  evaluation, cleaning, models or the training config. Cleaning, which samples models, lives above
  it in `ulorl.cleaning`.

The check follows imports transitively through the package, so a rule cannot be broken through an
allowed module either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "ulorl"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package modules `path` imports (`from a import b` counts `a.b` when that is a module)."""
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return {m for m in out if m == "ulorl" or m.startswith("ulorl.")} & set(known)


def _closure(start: str, known: dict[str, Path]) -> dict[str, str]:
    """Every package module reachable from `start`, each with the module that first imports it."""
    seen, todo = {start: ""}, [start]
    while todo:
        cur = todo.pop()
        for dep in _imports(cur, known[cur], known):
            if dep not in seen:
                seen[dep] = cur
                todo.append(dep)
    return seen


def _chain(seen: dict[str, str], mod: str) -> str:
    path = [mod]
    while seen[path[-1]]:
        path.append(seen[path[-1]])
    return " <- ".join(path)


ALLOWED = {
    "ulorl.algo": ("ulorl.algo",),
    "ulorl.data": ("ulorl.data", "ulorl.tasks", "ulorl.errors"),
}


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer: str) -> None:
    known = _modules()
    allowed = ALLOWED[layer]
    members = [m for m in known if m == layer or m.startswith(layer + ".")]
    assert members, f"no modules found under {layer}"
    bad = []
    for mod in members:
        seen = _closure(mod, known)
        bad += [_chain(seen, dep) for dep in seen
                if not any(dep == a or dep.startswith(a + ".") for a in allowed)]
    assert not bad, f"{layer} may import only {allowed}; found:\n" + "\n".join(sorted(set(bad)))


def test_the_rule_would_catch_a_violation(tmp_path: Path) -> None:
    # the checker itself: a module importing rollout lazily, inside a function, is found
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from ulorl.rollout.engines.base import Engine\n    return Engine\n")
    known = _modules()
    known["ulorl.data._probe"] = src
    assert "ulorl.rollout.engines.base" in _closure("ulorl.data._probe", known)


def test_forbidden_neighbours_exist() -> None:
    # the names the rules exclude are real modules (a rename would make the rules vacuous)
    known = _modules()
    for m in ("ulorl.rollout", "ulorl.reward", "ulorl.evaluation", "ulorl.config", "ulorl.cleaning"):
        assert m in known
