"""Every module of the package imports when it is the first one imported: no circular import hides behind an
order that happens to work (importing `ulorl.rollout.engines.base` first once failed on a cycle through the
config package, while `import ulorl.config` first worked)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHECK = r"""
import importlib, pathlib, sys
root = pathlib.Path("ulorl")
mods = sorted(".".join(p.with_suffix("").parts[:-1] if p.name == "__init__.py" else p.with_suffix("").parts)
              for p in root.rglob("*.py"))
bad = []
for m in mods:
    for k in [k for k in sys.modules if k == "ulorl" or k.startswith("ulorl.")]:
        del sys.modules[k]  # torch and transformers stay loaded: only the package's own import order is fresh
    try:
        importlib.import_module(m)
    except ImportError as e:
        if "partially initialized" in str(e) or "circular" in str(e):
            bad.append(f"{m}: {e}")
print(len(mods))
print("\n".join(bad))
"""


def test_every_module_imports_first_without_a_cycle():
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    count, *bad = out.stdout.strip().splitlines()
    assert int(count) > 100  # the whole package was walked
    assert not [b for b in bad if b], "circular imports:\n" + "\n".join(bad)
