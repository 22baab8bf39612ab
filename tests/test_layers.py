"""The layer rules, read from the source with `ast` (nothing is imported).

Config is a leaf (see the docstring of `ulorl/config/__init__.py`): a config module imports only
`ulorl.errors`, the other config modules, and the modules that name valid choices
(`algo` registries, `tasks`, the engine registry, the reward registries, the logger names).
What a config module imports is followed transitively through the module-level imports of
every module it reaches, so an allowed module that starts importing the run fails here too.
A package's `__init__` is followed when it is imported by name (`from ulorl.tasks import ...`),
not when one of its submodules is (`from ulorl.reward.extract import ...`).

The algorithm layer imports no config: `ulorl.algo` imports nothing from `ulorl` outside itself, nor do the
kernel helpers shared by the engine and the learner (`ulorl.kernels`), nor the durable text write
(`ulorl.durable`).
Data imports no engine: `ulorl.data` reaches only itself, the built-in tasks, the errors, the durable write and
its config section with the shared validators (cleaning, which samples models, sits above it in `ulorl.cleaning`).
The loop drives rollout, never the reverse: `ulorl.rollout` reaches nothing of the run wing
(`ulorl.run`), a learner or the distributed runtime, and `ulorl.plan` nothing of the run wing.
These rules count every import, lazy ones inside functions included. The top level holds only
the entry points and the shared leaves, and no component package holds a config section.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

def _config_modules() -> tuple[str, ...]:
    root = ROOT / "ulorl" / "config"
    return tuple(sorted("ulorl.config" if f.stem == "__init__" else f"ulorl.config.{f.stem}" for f in root.glob("*.py")))


CONFIG_MODULES = _config_modules()

# what the config layer may reach (a name, or a package prefix ending in ".")
CONFIG_MAY_IMPORT = ("ulorl", "ulorl.errors", "ulorl.config", "ulorl.config.", "ulorl.algo", "ulorl.algo.",
                     "ulorl.tasks", "ulorl.tasks.", "ulorl.rollout.engines.base", "ulorl.rollout.engines.registry",
                     "ulorl.reward.registry", "ulorl.reward.extract", "ulorl.reward.judge",
                     "ulorl.reward.judge_backends", "ulorl.reward.overlong", "ulorl.logging", "ulorl.logging.")

# never below the config: components are built from a config, not the reverse (a readable subset of the above)
UPPER_LAYERS = ("ulorl.run", "ulorl.learners", "ulorl.cli", "ulorl.api", "ulorl.plan", "ulorl.models",
                "ulorl.rollout.segment", "ulorl.rollout.pools", "ulorl.rollout.collect",
                "ulorl.rollout.engines.hf", "ulorl.rollout.engines.torch.engine", "ulorl.rollout.engines.vllm",
                "ulorl.distributed", "ulorl.reward.manager", "ulorl.reward.pool", "ulorl.reward.zygote",
                "ulorl.reward.rule", "ulorl.reward.terms", "ulorl.evaluation", "ulorl.data", "ulorl.cleaning")

# the top level: entry points and shared leaves only; everything that runs a job is in ulorl/run/
TOP_LEVEL_FILES = {"__init__.py", "__main__.py", "api.py", "cli.py", "errors.py", "trajectory.py", "lazy_exports.py",
                   "child_process.py", "durable.py"}


def _path(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


def _imports(module: str, everywhere: bool) -> set[str]:
    """The `ulorl` modules `module` imports: at module level, or `everywhere` (function bodies too)."""
    path = _path(module)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def walk(nodes):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not everywhere:
                continue
            yield node
            yield from walk(ast.iter_child_nodes(node))

    out: set[str] = set()
    for node in walk(tree.body):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names if _path(f"{base}.{a.name}")}  # submodules by name
    return {m for m in out if m == "ulorl" or m.startswith("ulorl.")}


def _reach(module: str, lazy: bool = True, stop: tuple[str, ...] = ()) -> dict[str, str]:
    """Every `ulorl` module reached from `module` -> the chain that reaches it ("a -> b -> c").

    `module`'s own imports count wherever they are; those of the modules it reaches count inside functions
    too when `lazy`. A module in `stop` is reached but not followed (it is checked as its own entry)."""
    seen: dict[str, str] = {}
    todo = [(m, f"{module} -> {m}") for m in _imports(module, everywhere=True)]
    while todo:
        mod, chain = todo.pop()
        if mod in seen or _path(mod) is None:
            continue
        seen[mod] = chain
        if mod not in stop:
            todo += [(m, f"{chain} -> {m}") for m in _imports(mod, everywhere=lazy)]
    return seen


def _allowed(module: str, allowed: tuple[str, ...]) -> bool:
    return any(module == a or (a.endswith(".") and module.startswith(a)) for a in allowed)


@pytest.mark.parametrize("module", CONFIG_MODULES)
def test_config_modules_are_leaves(module):
    assert _path(module), f"{module} has moved: update CONFIG_MODULES"
    reached = _reach(module, lazy=False, stop=CONFIG_MODULES)
    bad = {m: chain for m, chain in reached.items() if not _allowed(m, CONFIG_MAY_IMPORT)}
    assert not bad, "config imports above its layer:\n" + "\n".join(sorted(bad.values()))


def test_upper_layers_are_not_allowed_to_config():
    # the allow-list above must keep excluding what builds components from a config
    assert not [m for m in UPPER_LAYERS if _allowed(m, CONFIG_MAY_IMPORT)]


def test_importing_the_config_loads_no_upper_layer():
    code = "import sys, ulorl.config; print('\\n'.join(sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    loaded = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            check=True).stdout.split()
    upper = sorted(m for m in loaded if any(m == u or m.startswith(u + ".") for u in UPPER_LAYERS))
    assert not upper, f"import ulorl.config loads {upper}"


def _members(package: str) -> list[str]:
    """`package` and every module below it (a sub-package by its name, not as `...__init__`)."""
    root = ROOT.joinpath(*package.split("."))
    if root.with_suffix(".py").is_file():  # a module at the top of its layer (a shared leaf)
        return [package]
    out = []
    for p in root.rglob("*.py"):
        parts = p.relative_to(root).with_suffix("").parts
        out.append(".".join((package, *(parts[:-1] if parts[-1] == "__init__" else parts))))
    return sorted(out)


# layer -> what it may reach: itself plus these (names, or package prefixes ending in ".")
LEAF_RULES = {
    "ulorl.algo": ("ulorl.algo", "ulorl.algo."),  # algo imports no config: hyper-parameters arrive as arguments
    # kernel helpers shared by the engine and the learner: importing them checks or loads nothing else of ulorl
    "ulorl.kernels": ("ulorl.kernels", "ulorl.kernels."),
    "ulorl.durable": ("ulorl.durable",),  # the durable text write every layer may use (the planner included)
    # data imports no engine, reward, evaluation or model
    "ulorl.data": ("ulorl.data", "ulorl.data.", "ulorl.tasks", "ulorl.tasks.", "ulorl.errors", "ulorl.config.data",
                   "ulorl.config.loader", "ulorl.config.checks", "ulorl.config.hints", "ulorl.durable"),
}
NEVER_FROM_ROLLOUT = ("ulorl.run", "ulorl.learners", "ulorl.distributed")
NEVER_FROM_PLAN = ("ulorl.run",)


@pytest.mark.parametrize("layer", sorted(LEAF_RULES))
def test_leaf_layers_reach_only_what_they_may(layer):
    bad = [chain for m in _members(layer) for dep, chain in _reach(m).items() if not _allowed(dep, LEAF_RULES[layer])]
    assert not bad, f"{layer} may reach only {LEAF_RULES[layer]}:\n" + "\n".join(sorted(set(bad)))


def test_the_loop_drives_rollout_never_the_reverse():
    up = tuple(u for n in NEVER_FROM_ROLLOUT for u in (n, n + "."))
    bad = [chain for m in _members("ulorl.rollout") for dep, chain in _reach(m).items() if _allowed(dep, up)]
    assert not bad, "rollout reaches the loop:\n" + "\n".join(sorted(set(bad)))


def test_the_planner_shares_the_step_rule_without_the_run():
    up = tuple(u for n in NEVER_FROM_PLAN for u in (n, n + "."))
    bad = [chain for m in _members("ulorl.plan") for dep, chain in _reach(m).items() if _allowed(dep, up)]
    assert not bad, "plan reaches the run wing:\n" + "\n".join(sorted(set(bad)))


def test_the_top_level_holds_only_entry_points_and_shared_leaves():
    files = {p.name for p in (ROOT / "ulorl").glob("*.py")}
    assert files <= TOP_LEVEL_FILES and len(files) <= 9, \
        f"loose files at the top level: {sorted(files - TOP_LEVEL_FILES)}"


def test_no_component_package_holds_a_config_section():
    # every section dataclass lives in ulorl/config/: no `config.py` in a component package
    stray = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ulorl").rglob("config.py"))
    assert not stray, f"config sections outside ulorl/config/: {stray}"


def test_the_checker_sees_a_lazy_import(tmp_path, monkeypatch):
    # a function-level import in a data module counts: the rule cannot be dodged by importing late
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ulorl.rollout.engines.base import Engine\n    return Engine\n")
    real = _path
    monkeypatch.setitem(globals(), "_path", lambda m: probe if m == "ulorl.data.probe" else real(m))
    assert "ulorl.rollout.engines.base" in _reach("ulorl.data.probe")
