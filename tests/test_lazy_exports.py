"""Packages whose `__init__` exports names lazily (`ulorl/lazy_exports.py`): every name resolves to the
object its submodule defines, whichever submodules were imported first, and unknown names fail as usual."""

from __future__ import annotations

import importlib
import types

import pytest

LAZY = ("ulorl.reward", "ulorl.rollout.engines")


@pytest.mark.parametrize("name", LAZY)
def test_every_export_is_the_submodules_object(name):
    pkg = importlib.import_module(name)
    for sub in set(pkg._EXPORTS.values()):  # importing a submodule binds it on the package: it must not shadow
        importlib.import_module(f"{name}.{sub}")
    for export, sub in pkg._EXPORTS.items():
        obj = getattr(pkg, export)
        assert not isinstance(obj, types.ModuleType), f"{name}.{export} is a module, not the exported object"
        assert obj is getattr(importlib.import_module(f"{name}.{sub}"), export)
    assert pkg.__all__ == sorted(pkg._EXPORTS) and set(dir(pkg)) >= set(pkg._EXPORTS)
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        pkg.not_a_name  # noqa: B018
    with pytest.raises(ImportError):
        exec(f"from {name} import not_a_name", {})
