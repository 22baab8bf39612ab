"""Rollout engines as Ray actors, and `RayEngine`, the driver-side `Engine` that fans out to them.

Each `EngineWorker` actor holds its own copy of the policy and an engine from the
registry (`rollout.engine`: hf on CPU). `RayEngine.generate` splits the prefixes
into contiguous chunks of near-equal size, one per actor, runs them concurrently,
and returns the outputs in input order; `stats` sums the actors' counters.
`sync_weights` puts the state dict into the object store once (`ray.put`) and
every actor loads it from there.

Deviations from one engine, by design: actor k samples with seed
`seed * num_engines + k` (distinct for every round and actor), and the HF engine
draws a whole batch from one generator, so a Ray run samples different tokens than
a local run with the same seed. The split is by number of prefixes (decode lengths
are unknown in advance); a long-tailed batch may leave one actor waiting for another.
"""

from __future__ import annotations

import torch

from ulorl.config.distributed import DistributedConfig
from ulorl.distributed.ray_cluster import actor_threads, cpu_model, require_ray
from ulorl.rollout.engines.base import EngineStats, GenerationOutput, SamplingParams, sum_stats


class EngineWorker:
    """Body of an engine actor: a private model copy behind a registry engine."""

    def __init__(self, name: str, model: torch.nn.Module, tokenizer, eos_ids: list[int], num_cpus: float,
                 device: str, engine_kw: dict) -> None:
        actor_threads(num_cpus)
        from ulorl.rollout.engines.registry import build_engine

        self.model = model.to(device)
        self.engine = build_engine(name, self.model, tokenizer, eos_ids, **engine_kw)

    def generate(self, prefixes: list[list[int]], max_new_tokens: int, params: SamplingParams,
                 seed: int | None) -> tuple[list[GenerationOutput], EngineStats]:
        return self.engine.generate(prefixes, max_new_tokens, params, seed), self.engine.stats

    def sync_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        self.engine.sync_weights(state_dict)

    def checksum(self) -> float:
        """Sum of all weights (tests: every actor holds the learner's weights)."""
        return float(sum(p.double().sum() for p in self.model.state_dict().values()))


def split_evenly(n: int, parts: int) -> list[tuple[int, int]]:
    """`[lo, hi)` bounds of `parts` contiguous chunks of `range(n)`, sizes differing by at most one."""
    base, extra = divmod(n, parts)
    bounds, lo = [], 0
    for k in range(parts):
        hi = lo + base + (k < extra)
        bounds.append((lo, hi))
        lo = hi
    return bounds


class RayEngine:
    """An `Engine` whose generation runs on `cfg.num_engines` Ray actors."""

    def __init__(self, cfg: DistributedConfig, name: str, model: torch.nn.Module, tokenizer, eos_ids: list[int],
                 device: str = "cpu", engine_kw: dict | None = None) -> None:
        self.ray = require_ray()
        remote = self.ray.remote(EngineWorker).options(num_cpus=cfg.cpus_per_engine, num_gpus=cfg.gpus_per_engine)
        model_ref = self.ray.put(cpu_model(model))  # one serialised copy in the object store for all actors
        self.actors = [remote.remote(name, model_ref, tokenizer, eos_ids, cfg.cpus_per_engine, device,
                                     engine_kw or {}) for _ in range(cfg.num_engines)]
        self._stats = [EngineStats() for _ in self.actors]

    @property
    def stats(self) -> EngineStats:
        return sum_stats(self._stats)

    def generate(self, prefixes: list[list[int]], max_new_tokens: int, params: SamplingParams,
                 seed: int | None = None) -> list[GenerationOutput]:
        chunks = [(k, lo, hi) for k, (lo, hi) in enumerate(split_evenly(len(prefixes), len(self.actors))) if hi > lo]
        n = len(self.actors)
        futures = [self.actors[k].generate.remote(prefixes[lo:hi], max_new_tokens, params,
                                                  None if seed is None else seed * n + k) for k, lo, hi in chunks]
        outs: list[GenerationOutput] = []
        for (k, _, _), (chunk_outs, stats) in zip(chunks, self.ray.get(futures)):
            outs += chunk_outs
            self._stats[k] = stats
        return outs

    def sync_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        ref = self.ray.put({k: v.detach().cpu() for k, v in state_dict.items()})
        self.ray.get([a.sync_weights.remote(ref) for a in self.actors])

    def checksums(self) -> list[float]:
        return self.ray.get([a.checksum.remote() for a in self.actors])

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []
