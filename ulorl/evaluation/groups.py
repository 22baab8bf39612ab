"""Sample k continuations of many prompts through any engine, batched, with a progress bar.

Each prompt is repeated k times and the flat list of prefixes is sent to the
engine `batch_size` prefixes per call (engine call i gets seed + i), so a batch
mixes problems and samples; outputs are regrouped per prompt in order.
"""

from __future__ import annotations

from tqdm.auto import tqdm

from ulorl.rollout.engines.base import Engine, GenerationOutput, SamplingParams


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
        for call, lo in enumerate(range(0, len(flat), batch_size)):
            chunk = flat[lo : lo + batch_size]
            got = engine.generate(chunk, max_new_tokens, params, seed=None if seed is None else seed + call)
            if len(got) != len(chunk):
                raise RuntimeError(f"engine returned {len(got)} outputs for {len(chunk)} prefixes")
            outs.extend(got)
            bar.update(len(chunk))
    return [outs[i * k : (i + 1) * k] for i in range(len(prefixes))]
