"""`ResponseSampler`: k sampled responses per question from one model, for the model-based cleaning steps.

A sampler is any callable `(messages_list, k) -> list[list[str]]`; this one renders
each question with the model's chat template and samples through an engine
(an engine of the registry over a local HF folder, `hf` by default) with a
progress bar.
"""

from __future__ import annotations

from collections.abc import Callable

from ulorl.data.loaders import encode_prompts, render_prompt
from ulorl.evaluation.groups import sample_groups
from ulorl.rollout.engines.base import Engine, SamplingParams

Sampler = Callable[[list[list[dict]], int], list[list[str]]]


class ResponseSampler:
    """Samples k responses per chat-message question through `engine`."""

    def __init__(self, engine: Engine, tokenizer, params: SamplingParams | None = None, max_new_tokens: int = 1024,
                 batch_size: int = 64, seed: int | None = 0, name: str = "model", progress: bool = True):
        self.engine, self.tokenizer = engine, tokenizer
        self.params = params or SamplingParams(temperature=0.85)
        self.max_new_tokens, self.batch_size, self.seed = max_new_tokens, batch_size, seed
        self.name, self.progress = name, progress

    @classmethod
    def from_path(cls, path: str, *, dtype: str = "float32", device: str = "cpu", trust_remote_code: bool = False,
                  engine: str = "hf", **kwargs) -> ResponseSampler:
        """Load a local HF model folder (or 'builtin') behind an engine of the registry (`hf`: any architecture)."""
        from ulorl.models import eos_token_ids, load_model, load_tokenizer
        from ulorl.rollout.engines.registry import build_engine

        tok = load_tokenizer(path, trust_remote_code=trust_remote_code)
        model = load_model(path, dtype=dtype, trust_remote_code=trust_remote_code, device=device)
        eng = build_engine(engine, model, tok, eos_token_ids(model, tok), max_batch=kwargs.get("batch_size", 64),
                           model_path=str(path), seed=kwargs.get("seed") or 0)
        return cls(eng, tok, name=str(path), **kwargs)

    def __call__(self, messages_list: list[list[dict]], k: int) -> list[list[str]]:
        prefixes = encode_prompts(self.tokenizer, [render_prompt(self.tokenizer, m) for m in messages_list])
        groups = sample_groups(self.engine, prefixes, k, self.params, self.max_new_tokens,
                               batch_size=self.batch_size, seed=self.seed, desc=f"clean: {self.name}",
                               progress=self.progress)
        return [[self.tokenizer.decode(o.tokens, skip_special_tokens=True) for o in g] for g in groups]
