"""transformers older than 5.0 is refused with one line naming the installed version and the fix
(`ulorl.models.versions`): under 4.57 the built-in models' `rope_parameters` would be ignored without a word."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ulorl.cli import EXIT_USER_ERROR
from ulorl.models.versions import MIN_TRANSFORMERS, DependencyError, check_transformers


@pytest.mark.parametrize("version", ["5.0.0", "5.17.0", "5.25.0", "6.1.2", "5.1.0.dev0", "not-a-version"])
def test_supported_or_unreadable_versions_pass(version):
    check_transformers(version)


@pytest.mark.parametrize("version", ["4.57.6", "4.51.3", "5.0.0rc1", "3.5.1"])
def test_older_versions_are_refused_naming_the_version_and_the_fix(version):
    with pytest.raises(DependencyError) as e:
        check_transformers(version)
    msg = str(e.value)
    assert f"transformers {version} is installed" in msg
    assert f"pip install -U 'transformers>={MIN_TRANSFORMERS}'" in msg
    assert "\n" not in msg


def test_the_cli_reports_an_old_transformers_in_one_line(tmp_path):
    """A fresh interpreter whose transformers says 4.57.6: `ulorl train` stops before any work with the user-error exit
    status, one line on stderr, no traceback, no run folder contents."""
    code = ("import sys, transformers; transformers.__version__ = '4.57.6'; from ulorl.cli import main; "
            f"sys.exit(main(['train', '-o', {str(tmp_path / 'run')!r}, 'train.steps=1']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == EXIT_USER_ERROR, done.stderr
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    assert len(lines) == 1 and lines[0].startswith("ulorl train: error: transformers 4.57.6 is installed"), lines
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
