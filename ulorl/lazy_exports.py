"""Package `__init__`s that import their public names on first use (PEP 562).

Importing a submodule runs its package's `__init__` first. When that `__init__` imported every
public name eagerly, `import ulorl.config.reward` (a config leaf) also loaded the reward workers,
and `import ulorl.config.data` loaded the loaders and pyarrow: the config layer could not be a leaf
at run time. With `lazy_exports`, `from ulorl.reward import RewardManager` still works and imports
`ulorl.reward.manager` only then.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package`, where `exports` maps a public name -> its submodule (relative)."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
