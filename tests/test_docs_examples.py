"""The examples in the README and docs/ stay true to the library and the CLI.

Python: the examples name real functions, called with arguments their signatures take.

The examples are fragments (their tensors come from the reader's trainer), so they are not run. Each `from ulorl...
import` must import; each call of an imported name, and each method call on an object made from an imported class
(`v = Name(...)` or `with Name(...) as v`), must bind to the signature (as many positional arguments, the same
keywords). A renamed function, method or keyword in the library fails here, not in a user's hands.

Shell: each `ulorl ...` line of a code block, and each example that a command's `--help` ends with (`ulorl.cli`'s
`Command.examples`), parses with that command's own parser (its flags and their values),
a preset it names from `configs/` exists, and its `key=value` overrides load onto that preset (or the defaults,
when the preset is the reader's own file), as `ulorl config` would. Each `python benchmarks/X.py` (or
`examples/X.py`) or `bash scripts/X.sh` names a file of the repository, and each `--flag` given to it is spelt in
that file (its argparse or its `case`). Nothing is run.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def fenced_blocks() -> list[tuple[str, str, list[str]]]:
    """(`file:line` of the opening fence, its language, its lines) of every fenced code block."""
    out = []
    for path in DOCS:
        lines, fence, start, block = path.read_text(encoding="utf-8").splitlines(), None, 0, []
        for i, line in enumerate(lines, 1):
            if line.lstrip().startswith("```"):
                if fence is not None:
                    out.append((f"{path.relative_to(ROOT)}:{start}", fence, block))
                fence, start, block = (line.strip("` ") if fence is None else None), i, []
            elif fence is not None:
                block.append(line)
    return out


def snippets() -> list[tuple[str, str]]:
    """(`file:line`, code) of every ```python block."""
    return [(where, "\n".join(lines) + "\n") for where, lang, lines in fenced_blocks() if lang == "python"]


SNIPPETS = snippets()


def test_the_docs_hold_python_examples():
    assert len(SNIPPETS) >= 5, [where for where, _ in SNIPPETS]


@pytest.mark.parametrize("where,code", SNIPPETS, ids=[where for where, _ in SNIPPETS])
def test_an_example_imports_real_names_and_calls_them_as_they_are_declared(where, code):
    tree = ast.parse(code)
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ulorl"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{where}: {node.module} has no {alias.name}"
                names[alias.asname or alias.name] = getattr(module, alias.name)
    assert names, f"{where}: imports nothing from ulorl"
    objects = {}  # variable -> the imported class it was made from
    for node in ast.walk(tree):
        made = [(node.targets, node.value)] if isinstance(node, ast.Assign) else []
        made += [([i.optional_vars], i.context_expr) for i in getattr(node, "items", [])]
        for targets, value in made:
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
                    inspect.isclass(names.get(value.func.id)):
                objects.update({t.id: names[value.func.id] for t in targets if isinstance(t, ast.Name)})
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in names:
            fn, what, bound = names[f.id], f.id, []
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in objects:
            cls = objects[f.value.id]
            assert hasattr(cls, f.attr), f"{where}: {cls.__name__} has no {f.attr}"
            fn, what, bound = getattr(cls, f.attr), f"{cls.__name__}.{f.attr}", [None]  # None for self
        else:
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue  # *args / **kwargs: nothing to count
        if len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and node.args[0].value is Ellipsis:
            continue  # `f(...)`: arguments elided
        sig = inspect.signature(fn)
        try:
            sig.bind(*bound, *[None] * len(node.args), **{k.arg: None for k in node.keywords})
        except TypeError as e:
            pytest.fail(f"{where}: {ast.unparse(node)[:80]} does not fit {what}{sig}: {e}")


def shell_blocks() -> list[tuple[str, list[str]]]:
    """(`file:line`, lines) of each fenced block that is not Python, continuation lines joined."""
    return [(where, re.sub(r"\\\n", " ", "\n".join(lines)).splitlines())
            for where, lang, lines in fenced_blocks() if lang != "python"]


def command_lines() -> list[tuple[str, list[str]]]:
    """(`file:line`, argv after `ulorl`) of each `ulorl` command in a fenced code block: comments dropped, `$NAME`
    replaced by a `NAME="..."` set earlier in the block; printed output is left out."""
    return [found for where, block in shell_blocks() for found in _commands(where, block)]


def _commands(where: str, block: list[str]) -> list[tuple[str, list[str]]]:
    found, env = [], {}
    for line in block:
        if not re.match(r"\s*(ulorl\s+(-|[a-z]+(\s|$))|[A-Z_]+=)", line):
            continue  # another program, Python, printed output (`ulorl train: error: ...`)
        if " [-" in line:
            continue  # a usage synopsis: `ulorl clean --input FILE [--k 8]`
        words = shlex.split(line, comments=True)
        if len(words) == 1 and re.fullmatch(r"[A-Z_]+=.*", words[0]):
            name, value = words[0].split("=", 1)
            env[name] = value
        elif len(words) >= 2 and words[0] == "ulorl":
            found.append((where, [x for w in words[1:] for x in (env[w[1:]].split() if w[1:] in env else [w])]))
    return found


def help_examples() -> list[tuple[str, list[str]]]:
    """(`ulorl NAME --help`, argv after `ulorl`) of each example a command's help ends with."""
    from ulorl.cli import COMMANDS as CLI_COMMANDS

    return [(f"ulorl {c.name} --help", shlex.split(line)[1:]) for c in CLI_COMMANDS for line, _ in c.examples]


COMMANDS = command_lines() + help_examples()


def test_the_docs_hold_ulorl_commands():
    assert len(COMMANDS) >= 25 and {argv[0] for _, argv in COMMANDS} >= {"train", "sft", "eval", "clean", "plot",
                                                                          "plan", "show", "config"}
    from ulorl.cli import COMMANDS as CLI_COMMANDS

    assert all(c.examples for c in CLI_COMMANDS)  # every command's help ends with examples


def test_a_commands_help_keeps_its_examples_lines(capsys, monkeypatch):
    from ulorl.cli import COMMANDS as CLI_COMMANDS
    from ulorl.cli import main

    monkeypatch.setenv("COLUMNS", "80")  # argparse fills text to the terminal's width
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    plan = next(c for c in CLI_COMMANDS if c.name == "plan")
    expected = "\n".join(["examples:", *(f"  # {what}\n  {line}" for line, what in plan.examples)])
    assert expected in out  # the longest line is not wrapped
    assert max(len(line) for line, _ in plan.examples) > 120
    assert "Simulate segment rollout (the real pools and rollout, lengths drawn from a\ndistribution)" in out  # filled


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[f"{w} {' '.join(a)[:40]}" for w, a in COMMANDS])
def test_a_documented_command_parses_and_its_overrides_load(where, argv):
    from ulorl.cli import build_parser, parse_args
    from ulorl.config import load_run_config
    from ulorl.errors import UlorlError

    if "--help" in argv:
        return  # argparse's own; the commands it names are the parser's
    try:
        args = parse_args(build_parser(), argv)
    except SystemExit:
        pytest.fail(f"{where}: `ulorl {shlex.join(argv)}` does not parse (its error is printed above)")
    preset = getattr(args, "config", None)
    if preset and preset.startswith("configs/"):
        assert (ROOT / preset).is_file(), f"{where}: no preset {preset}"
    if getattr(args, "overrides", None):
        path = ROOT / preset if preset and (ROOT / preset).is_file() else None
        try:
            load_run_config(path, args.overrides)
        except UlorlError as e:
            pytest.fail(f"{where}: `ulorl {shlex.join(argv)}`: {e}")


def script_commands() -> list[tuple[str, str, list[str]]]:
    """(`file:line`, script, its arguments) of each `python benchmarks/...` (or `examples/...`) or `bash scripts/...`
    in a code block."""
    out = []
    for where, block in shell_blocks():
        for line in block:
            for part in re.split(r"&&|\|\||;|\|", line.split(" #")[0]):
                m = re.match(r"\s*(?:\S*python3?|bash)\s+((?:benchmarks|scripts|examples)/\S+)(.*)", part)
                if m:
                    out.append((where, m.group(1), m.group(2).split()))
    return out


SCRIPTS = script_commands()


def test_the_docs_run_benchmarks_and_scripts():
    assert len(SCRIPTS) >= 20 and any(s == "scripts/setup.sh" for _, s, _ in SCRIPTS)


@pytest.mark.parametrize("where,script,args", SCRIPTS, ids=[f"{w} {s}" for w, s, _ in SCRIPTS])
def test_a_documented_script_exists_and_takes_its_flags(where, script, args):
    path = ROOT / script
    assert path.is_file(), f"{where}: {script} is not in the repository"
    text = path.read_text(encoding="utf-8")
    for flag in (a.split("=")[0] for a in args if a.startswith("--")):
        assert re.search(rf"[\"' ]{re.escape(flag)}[\"')=]", text), f"{where}: {script} has no {flag}"
