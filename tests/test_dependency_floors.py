"""`scripts/lowest-versions.txt` pins every dependency of pyproject.toml (and of its extras but `vllm`, which needs a
GPU) at the floor pyproject declares, so that the README's "the suite passes with every floor at once" stays about
the floors pyproject actually states. torch is the one exception the file names: its floor is tested in its own
environment."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
NOT_AT_THE_FLOOR = {"torch"}  # the CPU wheel of scripts/setup.sh; pyproject's torch floor has its own environment


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "scripts" / "lowest-versions.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"scripts/lowest-versions.txt: {line!r} is not a `name==version` pin"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def _floors() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {}
    extras = [r for name, reqs in project["optional-dependencies"].items() if name != "vllm" for r in reqs]
    for text in project["dependencies"] + extras:
        req = Requirement(text)
        lower = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert len(lower) == 1, f"pyproject.toml: {text!r} should have one `>=` floor"
        name = canonicalize_name(req.name)
        assert floors.setdefault(name, lower[0]) == lower[0], f"pyproject.toml: two floors for {name}"
    return floors


def test_every_floor_is_pinned_at_the_floor():
    pins, floors = _pins(), _floors()
    missing = sorted(set(floors) - set(pins))
    assert not missing, f"scripts/lowest-versions.txt lacks {missing}"
    off = {name: (str(floors[name]), str(pins[name])) for name in floors
           if name not in NOT_AT_THE_FLOOR and pins[name] != floors[name]}
    assert not off, f"pinned above or below pyproject's floor (floor, pin): {off}"


def test_the_torch_pin_is_inside_pyproject_s_range():
    torch = next(Requirement(t) for t in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                 ["dependencies"] if Requirement(t).name == "torch")
    assert _pins()["torch"] in torch.specifier
