"""`sft:` the supervised warm start on a built-in task's worked solutions."""

from __future__ import annotations

from dataclasses import dataclass

from ulorl.config.checks import positive, seed, share
from ulorl.config.loader import ConfigError, check_choice, check_field_types
from ulorl.tasks import SMALLEST_SIZE, BuiltinTask
from ulorl.tasks.odometer import MAX_STEPS as ODOMETER_MAX_STEPS


@dataclass
class SFTConfig:
    steps: int = 300  # the schedule's length; with until_p the SFT ends at a check or goes on to max_steps
    batch_size: int = 32  # sequences per batch (the cap per batch when bucketed)
    bucketed: bool = False  # length-bucketed batches under batch_tokens (faster, learns less reliably)
    batch_tokens: int = 1536  # padded tokens per bucketed batch
    lr: float = 3e-3
    warmup_steps: int = 30
    num_examples: int = 6000
    max_size: int = 64  # only problems with at most this many steps (train on short ones, RL learns long ones)
    seed: int = 0
    task: str = "builtin:chain"  # the built-in task whose worked solutions are trained on (ulorl.tasks)
    alpha: float | None = None  # size-law exponent of the SFT problems; None: the task's own
    max_response_tokens: int | None = None  # cut longer solutions there, without EOS (cheap long-problem steps)
    uniform: float = 0.0  # odometer only: share of SFT problems with sizes uniform on [2, max_size] (the rest: alpha)
    # curriculum: the first short_steps steps train only on problems of at most short_max_size steps (their own
    # examples, same size law), so that the per-step rule is learnt where no shortcut is (docs/long_run.md)
    short_steps: int = 0
    short_max_size: int = 20
    # with short_until_loss, the short phase goes on past short_steps (the schedule's lr held) while the mean loss
    # of its last 100 steps is at least this, up to short_max_steps in all; then the full phase's steps - short_steps.
    # When the table is learnt in short_steps nothing changes; a rounding that learns it late gets more short steps
    # (docs/long_run.md)
    short_until_loss: float | None = None
    short_max_steps: int | None = None
    # heads: a share of extra examples (heads x num_examples, in both phases) that are the first head_lines lines of
    # problems of any size (uniform on [2, head_max_size]), without EOS. A whole long solution holds one instance of its
    # first lines; held-out long answers failed there (the start value and the first table steps at a large counter;
    # docs/long_run.md), and a head costs ~6 x head_lines tokens where the whole solution costs thousands
    heads: float = 0.0
    head_lines: int = 12
    head_max_size: int | None = None  # the heads' largest problem (None: max_size)
    # tail: a share of extra examples (tail x num_examples, in the full-law phase only) that are whole worked solutions
    # with EOS of problems with sizes uniform on (max_size, tail_max_size]. A few whole answers past the SFT's lengths:
    # without them the seed decided whether the warm start wrote any worked solution past max_size (docs/long_run.md)
    tail: float = 0.0
    tail_max_size: int | None = None
    # check_every: every this many steps of the full phase (0: never), the exact P(worked solution) under the
    # evaluation's sampler (`ulorl.evaluation.reference`) of check_problems validation problems with sizes uniform
    # on [check_min_size, tail_max_size or max_size] (their own seed), logged as `sft/p_long`. With
    # tail_until_p_long, the full phase trains without the tail from the first check whose mean is at least that, to
    # the end of its schedule: how far the tail takes the long answers is measured, not the draw of a machine's
    # rounding over a fixed number of steps (docs/long_run.md)
    check_every: int = 0
    check_problems: int = 64
    check_min_size: int = 167  # odometer: n + 1 = 168 lines of 6 tokens, ~1,000 answer tokens
    tail_until_p_long: float | None = None
    # until_p: at the same checks, the exact P(worked solution) of check_problems validation problems drawn from the
    # SFT's own size law (their own seed, the same for every sft.seed), logged as `sft/p_valid`; the SFT ends at the
    # first check whose mean is at least until_p, and goes on past `steps` at the schedule's last learning rate while
    # it is not, up to max_steps in all. What a warm start knows is then measured, where a fixed number of steps
    # left it to the seed and the machine's rounding: the demo's SFT seeds ended 13-20 points apart after 300 steps
    # (README)
    until_p: float | None = None
    max_steps: int | None = None
    # torch threads for the SFT's training steps (0: as `train.threads`); its ops gave bit-identical weights with
    # 1 and 2 threads on CPU (docs/long_run.md), so a run whose engine wants one thread can train its SFT on two
    threads: int = 0
    # every this many steps the SFT saves its state (0: only when a signal stops it), and an interrupted SFT
    # continues from its last save to the weights it would have reached (ulorl.run.sft_state); a save of the
    # built-in long model takes ~0.04 s (docs/reliability.md)
    save_every: int = 100

    @property
    def length_text(self) -> str:
        """How long the SFT trains, in words (`300 steps`; with `until_p`, the target and the cap)."""
        if self.until_p is None:
            return f"{self.steps} steps"
        return f"until the validation P(worked solution) >= {self.until_p} at a check, at most {self.max_steps} steps"

    @property
    def largest_size(self) -> int:
        """The largest problem the SFT trains on: the tail's when there is one, else `max_size`."""
        return self.tail_max_size if self.tail else self.max_size

    def __post_init__(self) -> None:
        check_field_types(self, "sft.")
        for k in ("steps", "batch_size", "batch_tokens", "lr", "num_examples", "max_size"):
            positive(f"sft.{k}", getattr(self, k))
        positive("sft.warmup_steps", self.warmup_steps, allow_zero=True)
        seed("sft.seed", self.seed)
        for k in ("max_size", "short_max_size", "head_max_size"):
            if getattr(self, k) is not None and getattr(self, k) < SMALLEST_SIZE:
                raise ConfigError(f"sft.{k}={getattr(self, k)} must be >= {SMALLEST_SIZE} (the built-in tasks' "
                                  f"smallest problem has {SMALLEST_SIZE} steps)")
        positive("sft.short_steps", self.short_steps, allow_zero=True)
        positive("sft.short_max_size", self.short_max_size)
        positive("sft.threads", self.threads, allow_zero=True)
        positive("sft.save_every", self.save_every, allow_zero=True)
        positive("sft.head_lines", self.head_lines)
        positive("sft.check_every", self.check_every, allow_zero=True)
        positive("sft.check_problems", self.check_problems)
        positive("sft.check_min_size", self.check_min_size)
        if self.head_max_size is not None:
            positive("sft.head_max_size", self.head_max_size)
        share("sft.heads", self.heads, " (a share of sft.num_examples)")
        if self.heads and self.task != BuiltinTask.ODOMETER.value:
            raise ConfigError(f"sft.heads is for task builtin:odometer (lines of a fixed width), not {self.task}")
        share("sft.tail", self.tail, " (a share of sft.num_examples)")
        if self.tail:
            if self.task != BuiltinTask.ODOMETER.value:
                raise ConfigError(f"sft.tail is for task builtin:odometer (sizes from a lower bound), not {self.task}")
            if self.tail_max_size is None or not self.max_size < self.tail_max_size <= ODOMETER_MAX_STEPS:
                raise ConfigError(f"sft.tail needs sft.tail_max_size in (sft.max_size={self.max_size}, "
                                  f"{ODOMETER_MAX_STEPS}], got {self.tail_max_size}")
        if self.until_p is not None:
            share("sft.until_p", self.until_p, " (a mean probability)")
            if not self.check_every:
                raise ConfigError("sft.until_p ends the SFT at a check: it needs sft.check_every > 0")
        _capped_extension("sft.until_p", self.until_p, "sft.max_steps", self.max_steps, "the SFT's most steps",
                          "sft.steps", self.steps)
        if self.check_every and self.until_p is None and self.task != BuiltinTask.ODOMETER.value:
            raise ConfigError(f"sft.check_every alone measures odometer's long worked solutions (sft/p_long); for "
                              f"{self.task} it needs sft.until_p (sft/p_valid, the SFT's own size law)")
        if self.check_every and self.task == BuiltinTask.ODOMETER.value and self.check_min_size > self.largest_size:
            raise ConfigError(f"sft.check_min_size={self.check_min_size} is past the SFT's largest problem "
                              f"({self.largest_size} steps)")
        if self.tail_until_p_long is not None:
            share("sft.tail_until_p_long", self.tail_until_p_long, " (a mean probability)")
            if not (self.check_every and self.tail):
                raise ConfigError("sft.tail_until_p_long drops the tail at a check: it needs sft.check_every > 0 and "
                                  "sft.tail > 0")
        share("sft.uniform", self.uniform)
        if self.short_steps > self.steps:
            raise ConfigError(f"sft.short_steps={self.short_steps} is more than sft.steps={self.steps}")
        if self.short_until_loss is not None:
            positive("sft.short_until_loss", self.short_until_loss)
            if not self.short_steps:
                raise ConfigError("sft.short_until_loss extends the short phase: it needs sft.short_steps > 0")
        _capped_extension("sft.short_until_loss", self.short_until_loss, "sft.short_max_steps", self.short_max_steps,
                          "the short phase's most steps", "sft.short_steps", self.short_steps)
        check_choice("sft.task", self.task, BuiltinTask)
        for k in ("alpha", "max_response_tokens"):
            if getattr(self, k) is not None:
                positive(f"sft.{k}", getattr(self, k))


def _capped_extension(key: str, target: float | None, cap_key: str, cap: int | None, cap_meaning: str,
                      floor_key: str, floor: int) -> None:
    """A target (`key`) that lets a phase go on past its planned `floor` steps needs a cap of at least `floor`; a cap
    without its target is refused."""
    if target is not None:
        if cap is None or cap < floor:
            raise ConfigError(f"{key} needs {cap_key}, {cap_meaning}, at least {floor_key}={floor}; got {cap}")
    elif cap is not None:
        raise ConfigError(f"{cap_key} caps the steps that {key} adds; set that too, or leave both out")
