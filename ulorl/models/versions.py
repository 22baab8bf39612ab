"""The releases of transformers (and of accelerate, which it imports) that the model code needs, checked when
`ulorl.models` is imported, before transformers' model code is.

- **transformers >= 5.0.** ulorl reads and writes model configs in transformers 5's layout (`rope_parameters`
  holding `rope_theta`, YaRN in `ulorl.models.loading.yarn_rope_parameters`) and loads with
  `from_pretrained(dtype=...)`. Under transformers 4.x this does not fail everywhere: 4.57 ignores
  `rope_parameters`, so the built-in `long` model would run at RoPE base 10,000 (Qwen3Config's default) instead of
  10 and YaRN would not be applied, without a word (4.51 refuses `dtype=` outright).
- **accelerate >= 1.2, when installed beside transformers 5.0** (peft brings it, and transformers 5 reads GGUF
  files only with it). transformers 5.0.0 imports `accelerate.utils.modeling.get_module_size_with_ties` (new in
  accelerate 1.2) whenever accelerate is installed, although its own metadata allows accelerate 1.1: with 1.1
  every model load fails with an ImportError from inside transformers. From 5.1 transformers defines that function
  itself, so an older accelerate is let through there (the GPU machine's image, transformers 5.17, may carry one).

The full test suite passes on transformers 5.0.0, 5.17.0 (the GPU machine's) and 5.25.0 (with torch 2.13), also
with every declared floor at once (README); on transformers 4.57.6 five tests fail, on 4.51.3 most of them. An
older release is refused here in one line with the fix, rather than left to train something else or to fail deep
inside a library. Versions are read from the installed packages' metadata, so nothing is imported to check them
(a source tree without metadata is imported for its `__version__`).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as metadata_version

from packaging.version import InvalidVersion, Version

from ulorl.errors import UlorlError


@dataclass(frozen=True)
class Floor:
    minimum: str  # the oldest release that works
    why: str  # what goes wrong below it, as the end of a sentence
    transformers_below: str | None = None  # the floor holds only beside a transformers older than this


FLOORS: dict[str, Floor] = {
    "transformers": Floor("5.0", "it writes model configs in transformers 5's layout (`rope_parameters`), which 4.x "
                                 "ignores (the built-in models' RoPE base and YaRN would not apply)"),
    "accelerate": Floor("1.2", "transformers 5.0 imports `get_module_size_with_ties` from accelerate whenever it is "
                               "installed, and that came in accelerate 1.2 (transformers >= 5.1 does not need it)",
                        transformers_below="5.1"),
}


class DependencyError(UlorlError):
    """An installed library older than ulorl supports (one line: which, which version, the fix)."""


def check_version(name: str, version: str) -> None:
    """Raise `DependencyError` when `version` of package `name` (a key of `FLOORS`) is older than its floor.

    A pre-release of the floor (`5.0.0rc1`) counts as older; a version string that does not parse is let through."""
    floor = FLOORS[name]
    if _older(version, floor.minimum):
        raise DependencyError(
            f"{name} {version} is installed; ulorl needs {name} >= {floor.minimum}: {floor.why}. "
            f"Upgrade with: pip install -U '{name}>={floor.minimum}'")


def installed_version(name: str) -> str:
    """The version of the installed package `name`: from its metadata, else (a source tree on `sys.path`, which has
    none) from the module's `__version__`; `PackageNotFoundError` when it is not importable at all."""
    try:
        return metadata_version(name)
    except PackageNotFoundError:
        if importlib.util.find_spec(name) is None:
            raise
        return str(getattr(importlib.import_module(name), "__version__", ""))


def check_installed(version_of: Callable[[str], str] = installed_version) -> None:
    """`check_version` for every package of `FLOORS` that is installed (transformers always is: a dependency),
    where its floor applies to the installed transformers.

    `version_of(name)` gives an installed package's version or raises `PackageNotFoundError`."""
    installed = {}
    for name in FLOORS:
        try:
            installed[name] = version_of(name)
        except PackageNotFoundError:
            continue
    for name, version in installed.items():
        below = FLOORS[name].transformers_below
        if below is None or _older(installed.get("transformers", ""), below):
            check_version(name, version)


def _older(version: str, than: str) -> bool:
    """`version` < `than`; a version that does not parse counts as not older."""
    try:
        return Version(version) < Version(than)
    except InvalidVersion:
        return False
