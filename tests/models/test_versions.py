"""transformers older than 5.0, and accelerate older than 1.2 beside transformers 5.0, are refused with one line
naming the installed version and the fix (`ulorl.models.versions`): under transformers 4.57 the built-in models'
`rope_parameters` would be ignored without a word, and transformers 5.0 beside accelerate 1.1 fails inside its own
import."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import PackageNotFoundError

import packaging
import pytest

from ulorl.cli import EXIT_USER_ERROR
from ulorl.models.versions import FLOORS, DependencyError, check_installed, check_version, installed_version


@pytest.mark.parametrize("name, version", [("transformers", v) for v in
                                           ["5.0.0", "5.17.0", "5.25.0", "6.1.2", "5.1.0.dev0", "not-a-version"]]
                         + [("accelerate", v) for v in ["1.2.0", "1.16.0", "2.0.0"]])
def test_supported_or_unreadable_versions_pass(name, version):
    check_version(name, version)


@pytest.mark.parametrize("name, version", [("transformers", v) for v in ["4.57.6", "4.51.3", "5.0.0rc1", "3.5.1"]]
                         + [("accelerate", v) for v in ["1.1.1", "1.1.0", "0.33.0"]])
def test_older_versions_are_refused_naming_the_version_and_the_fix(name, version):
    with pytest.raises(DependencyError) as e:
        check_version(name, version)
    msg = str(e.value)
    assert msg.startswith(f"{name} {version} is installed; ulorl needs {name} >= {FLOORS[name].minimum}: ")
    assert msg.endswith(f"pip install -U '{name}>={FLOORS[name].minimum}'")
    assert "\n" not in msg


def _lookup(installed: dict[str, str]):
    def version(name: str) -> str:
        if name not in installed:
            raise PackageNotFoundError(name)
        return installed[name]
    return version


def test_check_installed_skips_what_is_not_installed_and_checks_the_rest():
    check_installed(_lookup({"transformers": "5.0.0"}))  # no accelerate: nothing to check
    check_installed(_lookup({"transformers": "5.0.0", "accelerate": "1.2.0"}))
    with pytest.raises(DependencyError, match=r"^accelerate 1\.1\.0 is installed"):
        check_installed(_lookup({"transformers": "5.0.0", "accelerate": "1.1.0"}))
    with pytest.raises(DependencyError, match=r"^transformers 4\.57\.6 is installed"):
        check_installed(_lookup({"transformers": "4.57.6"}))


@pytest.mark.parametrize("transformers", ["5.1.0", "5.17.0", "5.25.0"])
def test_an_old_accelerate_is_let_through_beside_transformers_that_no_longer_imports_from_it(transformers):
    # from 5.1 transformers defines get_module_size_with_ties itself (the GPU machine's image has 5.17)
    check_installed(_lookup({"transformers": transformers, "accelerate": "1.1.0"}))


def test_installed_versions_come_from_metadata_or_from_a_source_tree_s_module(tmp_path, monkeypatch):
    assert installed_version("packaging") == packaging.__version__  # from its metadata
    (tmp_path / "ulorl_src_tree_pkg").mkdir()  # a source tree on sys.path: no metadata, a __version__
    (tmp_path / "ulorl_src_tree_pkg" / "__init__.py").write_text("__version__ = '1.1.0'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_version("ulorl_src_tree_pkg") == "1.1.0"
    with pytest.raises(PackageNotFoundError):
        installed_version("ulorl_no_such_package")


def test_this_environment_passes():
    check_installed()  # the versions the suite runs with


@pytest.mark.parametrize("name, version, fake", [("transformers", "4.57.6", {"transformers": "4.57.6"}),
                                                 ("accelerate", "1.1.0", {"transformers": "5.0.0",
                                                                          "accelerate": "1.1.0"})])
def test_the_cli_reports_an_old_library_in_one_line(name, version, fake, tmp_path):
    """A fresh interpreter whose installed metadata says the versions of `fake`: `ulorl train` stops before any work,
    and before transformers' model code is imported, with the user-error exit status, one line on stderr naming
    `name` at `version`, no traceback, no run folder contents."""
    code = ("import sys, importlib.metadata as m; real = m.version; "
            f"m.version = lambda n: {fake!r}.get(n) or real(n); "
            "from ulorl.cli import main; "
            f"rc = main(['train', '-o', {str(tmp_path / 'run')!r}, 'train.steps=1']); "
            "assert 'transformers.modeling_utils' not in sys.modules; sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == EXIT_USER_ERROR, done.stderr
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert len(lines) == 1 and lines[0].startswith(f"ulorl train: error: {name} {version} is installed"), lines
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
