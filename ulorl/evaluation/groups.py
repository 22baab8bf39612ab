"""Sample k continuations of many prompts through any engine, batched, with a progress bar.

Each prompt is repeated k times and the flat list of prefixes is sent to the
engine, outputs regrouped per prompt in order (engine call i gets seed + i). An
engine with continuous batching (the torch engine) gets every prefix in one call (up
to `MAX_CALL_TOKENS` token cells) and refills a finished row's slot at once: at long
lengths one hopeless problem's samples run to the cap, and a call of `batch_size`
prefixes would decode most of its iterations with a few rows. Other engines get
`batch_size` prefixes per call, so a batch mixes problems and samples.
"""

from __future__ import annotations

from tqdm.auto import tqdm

from ulorl.rollout.engines.base import Engine, GenerationOutput, SamplingParams

# A continuous-batching call holds its outputs as (prefixes x max_new_tokens) tensors: calls are cut to at most
# this many token cells (2^24: 200 MB of token ids and log-probs), e.g. 512 prefixes at 32k new tokens.
MAX_CALL_TOKENS = 1 << 24


def sample_groups(
    engine: Engine,
    prefixes: list[list[int]],
    k: int,
    params: SamplingParams,
    max_new_tokens: int,
    batch_size: int = 64,
    seed: int | None = 0,
    desc: str = "sampling",
    progress: bool = True,
) -> list[list[GenerationOutput]]:
    """`k` outputs per prefix: result[i][j] is sample j of prefix i."""
    flat = [p for p in prefixes for _ in range(k)]
    outs: list[GenerationOutput] = []
    with tqdm(total=len(flat), desc=desc, unit="sample", disable=not progress or not flat, leave=False) as bar:
        continuous = getattr(engine, "continuous_batching", False)
        size = max(batch_size, MAX_CALL_TOKENS // max_new_tokens) if continuous else batch_size
        for call, lo in enumerate(range(0, len(flat), size)):
            chunk = flat[lo : lo + size]
            call_seed = None if seed is None else seed + call
            if continuous:
                got = engine.generate(chunk, max_new_tokens, params, seed=call_seed, progress=bar.update)
            else:
                got = engine.generate(chunk, max_new_tokens, params, seed=call_seed)
                bar.update(len(chunk))
            if len(got) != len(chunk):
                raise RuntimeError(f"engine returned {len(got)} outputs for {len(chunk)} prefixes")
            outs.extend(got)
    return [outs[i * k : (i + 1) * k] for i in range(len(prefixes))]
