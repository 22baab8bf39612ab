"""The transformers release the model code needs, checked when `ulorl.models` is imported.

ulorl reads and writes model configs in transformers 5's layout (`rope_parameters` holding `rope_theta`, YaRN in
`ulorl.models.loading.yarn_rope_parameters`) and loads with `from_pretrained(dtype=...)`. Under transformers 4.x
this does not fail everywhere: 4.57 ignores `rope_parameters`, so the built-in `long` model would run at RoPE base
10,000 (Qwen3Config's default) instead of 10 and YaRN would not be applied, without a word (4.51 refuses `dtype=`
outright). The full test suite passes on transformers 5.0.0, 5.17.0 (the GPU machine's) and 5.25.0 (with torch
2.13); on 4.57.6 five tests fail, on 4.51.3 most of them. So an older release is refused here, with the fix, rather
than left to train something else.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from ulorl.errors import UlorlError

MIN_TRANSFORMERS = "5.0"


class DependencyError(UlorlError):
    """An installed library older than ulorl supports (one line: which, which version, the fix)."""


def check_transformers(version: str) -> None:
    """Raise `DependencyError` when `version` (transformers' `__version__`) is older than `MIN_TRANSFORMERS`.

    A pre-release of 5.0 (`5.0.0rc1`) counts as older; a version string that does not parse is let through."""
    try:
        too_old = Version(version) < Version(MIN_TRANSFORMERS)
    except InvalidVersion:
        return
    if too_old:
        raise DependencyError(
            f"transformers {version} is installed; ulorl needs transformers >= {MIN_TRANSFORMERS}: it writes model "
            f"configs in transformers 5's layout (`rope_parameters`), which 4.x ignores (the built-in models' RoPE "
            f"base and YaRN would not apply). Upgrade with: pip install -U 'transformers>={MIN_TRANSFORMERS}'")
