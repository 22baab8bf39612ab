"""`EvalConfig`: the evaluation protocol (paper: 32 samples, temperature 0.85, top_p 0.95, top_k 20, avg@32)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ulorl.config.checks import seed
from ulorl.config.loader import ConfigError, check_field_types
from ulorl.rollout.engines.base import SamplingParams, check_sampling


@dataclass
class EvalConfig:
    """How to sample and score a held-out set."""

    k: int = 32  # samples per problem (paper: 32)
    temperature: float = 0.85  # paper's evaluation sampling
    top_p: float = 0.95
    top_k: int = 20  # -1: off
    max_new_tokens: int = 1024  # responses without EOS within this budget count as truncated (reward 0)
    num_problems: int | None = None  # None: every problem; else the first N
    pass_k: list[int] = field(default_factory=lambda: [1, 8, 32])  # reported when <= k; pass@k always reported
    seed: int = 0  # sampling seed (engine call i uses seed + i)
    batch_size: int = 64  # prefixes (problems x samples) per engine call; the torch engine takes them all in one
    # call and decodes its slots at once (`rollout.max_batch` in training, --batch-size in `ulorl eval`)
    # `ulorl train` also scores each held-out row's worked solution (`extra_info.solution`, the built-in tasks')
    # exactly: P(the sampler writes it), avg@infinity without sampling noise, for tasks whose right answer has
    # one worked form (ulorl/evaluation/reference.py). One forward pass per problem; paired before/after
    reference: bool = False
    # the exact measure over the first N held-out problems (None: the sampled ones, `num_problems`). It costs one
    # forward pass a problem, so a held-out set several times avg@k's costs little and gives the paired
    # comparison its power when a run's gains sit on a few problems. Needs `reference` and N >= num_problems (the
    # sampled problems are its first ones); the held-out source must hold N rows (`data.eval_size` when built in)
    reference_problems: int | None = None
    # the held-out problems whose worked solution has at least this many tokens (EOS included) get their own
    # paired comparison in the run's summary (sampled and, with `reference`, exact); needs the rows' solutions
    long_tokens: int = 1000

    def __post_init__(self) -> None:
        check_field_types(self, "eval.")
        for name in ("k", "max_new_tokens", "batch_size", "long_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"eval.{name} must be >= 1, got {getattr(self, name)}")
        check_sampling(self.temperature, self.top_p, self.top_k, "eval.")
        seed("eval.seed", self.seed)
        if self.num_problems is not None and self.num_problems < 1:
            raise ConfigError(f"eval.num_problems must be >= 1 or null, got {self.num_problems}")
        if self.reference_problems is not None:
            if not self.reference:
                raise ConfigError("eval.reference_problems needs eval.reference: true (it sizes the exact measure)")
            if self.num_problems is None or self.reference_problems < self.num_problems:
                raise ConfigError(f"eval.reference_problems must be >= eval.num_problems (the sampled problems are "
                                  f"its first ones), got {self.reference_problems} with num_problems "
                                  f"{self.num_problems}")
        if not self.pass_k or any(int(x) < 1 for x in self.pass_k):
            raise ConfigError(f"eval.pass_k must be a non-empty list of integers >= 1, got {self.pass_k}")

    def sampling(self) -> SamplingParams:
        """The sampler settings of this protocol (temperature, top_p, top_k)."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)

    def sampled(self, records: list) -> list:
        """The held-out rows avg@k samples: the first `num_problems` (all when None)."""
        return list(records[: self.num_problems]) if self.num_problems else list(records)

    def referenced(self, records: list, source: str = "the held-out set") -> list:
        """The held-out rows the exact measure scores: the first `reference_problems`, else the sampled ones. Raises
        ConfigError naming `source` when it holds fewer rows than `reference_problems`."""
        if self.reference_problems is None:
            return self.sampled(records)
        if len(records) < self.reference_problems:
            raise ConfigError(f"eval.reference_problems={self.reference_problems} but {source} has {len(records)} "
                              "rows; draw more (data.eval_size for a built-in task) or lower it")
        return list(records[: self.reference_problems])

    def reported_pass_k(self) -> list[int]:
        """The pass@k' values reported: those in `pass_k` that are <= k, plus k itself."""
        return sorted({int(x) for x in self.pass_k if int(x) <= self.k} | {self.k})
