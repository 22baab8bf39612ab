"""`ulorl sft`: supervised warm start on the built-in task's worked solutions.

RL needs a policy with non-trivial but imperfect accuracy. We train the tiny model
on worked solutions of problems with at most `sft.max_size` steps for a short,
fixed budget, so it answers short problems often and long ones rarely: RL has
something to learn. `sft.task` picks the built-in task (`builtin:chain` or
`builtin:odometer`) and `sft.alpha` its size law. With `sft.max_response_tokens`,
longer worked solutions are cut there without EOS: since every step of a built-in
task is local, a prefix of a long solution teaches the step at counter values that
only long problems reach, for a fraction of the tokens. With `sft.short_steps`, the
first steps train only on problems of at most `sft.short_max_size` steps (a
curriculum: the long run's warm start learns odometer's addition table there, where
no shortcut through earlier lines exists; docs/long_run.md), then on the full law. With
`sft.short_until_loss`, the short phase goes on past `sft.short_steps` (the learning rate held)
until the mean loss of its last 100 steps is under that bound, or `sft.short_max_steps`: when
the table is learnt is the machine's rounding's draw, and the full phase must not start before.
With `sft.heads`, both phases also train on the first `sft.head_lines` lines of problems of
every size (`head_sequences`): a long answer's first lines, which a whole long solution
teaches once per thousands of tokens. With `sft.tail`, the full-law phase also trains on a few whole
solutions of problems past `sft.max_size` (`tail_sequences`, sizes uniform up to `sft.tail_max_size`): RL
still learns the long answers, but from a warm start that writes some of them (docs/long_run.md). With
`sft.check_every`, every so many full-phase steps the exact P(worked solution) of a few validation problems of
>= `sft.check_min_size` steps (`check_sequences`, under the evaluation's sampler) is logged as `sft/p_long`; with
`sft.tail_until_p_long`, the tail leaves the full phase at the first check that reaches that mean: how far the
tail takes the long answers is then measured, where a fixed number of tail steps left it to the machine's rounding
(after that, `sft/p_long` is measured at the SFT's last step only: the checks between decide nothing).
With `sft.until_p`, the same checks also score validation problems from the SFT's own size law (`valid_sequences`,
`sft/p_valid`) and the SFT ends at the first whose mean reaches `sft.until_p`, going on past `sft.steps` at its last
learning rate while none does (up to `sft.max_steps`): the demo's warm start is then a measured accuracy, where 300
steps left it to the SFT seed (13-20 points apart; README).
The loss is the mean cross-entropy over response tokens
(prompt tokens are not trained). Batches are random (`sft.bucketed=false`, the
default: mixed lengths learn the task more reliably) or length-bucketed under a
token budget (less padding, faster steps). Writes an HF folder and a loss curve. Every `sft.save_every` steps and
on a signal the SFT saves its state, and the same call continues an interrupted SFT from it (`ulorl.run.sft_state`).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import NamedTuple

import torch
from tqdm.auto import tqdm

from ulorl.config import ModelConfig, SFTConfig
from ulorl.data.batching import bucket_batches
from ulorl.evaluation.reference import score_pairs
from ulorl.models import load_model, load_tokenizer
from ulorl.rollout.engines.base import SamplingParams
from ulorl.run.console import say
from ulorl.run.sft_state import (STATE_FILE, SFTProgress, SFTStateError, drop_state, drop_unfinished_saves, has_state,
                                 load_state, record_settings, save_state, settings_changes, sft_settings)
from ulorl.run.signals import StopOnSignal
from ulorl.tasks import BuiltinTask, task_rows

METRICS_FILE = "metrics.jsonl"

SFT_SEED_OFFSET = 7919  # SFT problems never share a seed with the RL train/eval splits
HEADS_SEED_OFFSET = 104729  # the heads' problems are not the whole solutions' problems
TAIL_SEED_OFFSET = 130363  # nor the tail's
CHECK_SEED_OFFSET = 155921  # nor the checks' validation problems
VALID_SEED = 180749  # nor `sft.until_p`'s, which are the same for every `sft.seed`
SHORT_LOSS_WINDOW = 100  # `sft.short_until_loss` compares the mean loss of the short phase's last this many steps


def sft_sequences(tokenizer, n: int, seed: int, max_size: int, task: str = BuiltinTask.CHAIN.value,
                  alpha: float | None = None, max_response_tokens: int | None = None, uniform: float = 0.0,
                  min_size: int | None = None) -> list[tuple[list[int], list[int]]]:
    """(prompt tokens, response tokens incl. EOS) for `n` problems of `task` of size <= max_size.

    `alpha`: the size law's exponent (None: the task's default); `uniform`: the share of sizes drawn
    uniformly instead (odometer only); `min_size`: the smallest size (None: the task's). Responses longer than
    `max_response_tokens` are cut to that many tokens, without EOS."""
    law = {} if min_size is None else {"min_size": min_size}
    rows = task_rows(task, n, seed=seed + SFT_SEED_OFFSET, split="sft", max_size=max_size, alpha=alpha,
                     uniform=uniform, **law)
    out = []
    for r in rows:
        text = tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        resp = tokenizer(r["extra_info"]["solution"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        out.append((prompt, resp[:max_response_tokens] if max_response_tokens else resp))
    return out


def head_sequences(tokenizer, n: int, seed: int, max_size: int, lines: int) -> list[tuple[list[int], list[int]]]:
    """(prompt tokens, the first `lines` lines of the worked solution) for `n` odometer problems with sizes uniform
    on [2, max_size]; no EOS unless the whole solution fits (their own seed: not the other SFT problems)."""
    from ulorl.tasks.odometer import TOKENS_PER_LINE

    seqs = sft_sequences(tokenizer, n, seed + HEADS_SEED_OFFSET, max_size, BuiltinTask.ODOMETER.value, uniform=1.0)
    return [(p, r[: TOKENS_PER_LINE * lines]) for p, r in seqs]


def tail_sequences(tokenizer, n: int, seed: int, min_size: int, max_size: int) -> list[tuple[list[int], list[int]]]:
    """(prompt tokens, whole worked solution with EOS) for `n` odometer problems with sizes uniform on
    [min_size, max_size] (their own seed: not the other SFT problems)."""
    return sft_sequences(tokenizer, n, seed + TAIL_SEED_OFFSET, max_size, BuiltinTask.ODOMETER.value, uniform=1.0,
                         min_size=min_size)


def check_sequences(tokenizer, cfg: SFTConfig) -> list[tuple[list[int], list[int]]]:
    """The validation problems of `sft.check_every`: `sft.check_problems` whole worked solutions (EOS included) of
    odometer problems with sizes uniform on [`sft.check_min_size`, the SFT's largest], on their own seed."""
    return sft_sequences(tokenizer, cfg.check_problems, cfg.seed + CHECK_SEED_OFFSET, cfg.largest_size,
                         BuiltinTask.ODOMETER.value, uniform=1.0, min_size=cfg.check_min_size)


def valid_sequences(tokenizer, cfg: SFTConfig) -> list[tuple[list[int], list[int]]]:
    """The validation problems of `sft.until_p`: `sft.check_problems` whole worked solutions (EOS included) of
    `sft.task` drawn from the SFT's own size law (`sft.max_size`, `sft.alpha`, `sft.uniform`), on their own seed,
    the same for every `sft.seed`: the seeds' warm starts are measured on the same problems (256 draws of the demo's
    long-tailed law put one model's mean 8 points apart)."""
    return sft_sequences(tokenizer, cfg.check_problems, VALID_SEED, cfg.max_size, cfg.task, cfg.alpha,
                         uniform=cfg.uniform)


def mean_p_reference(model, seqs: list[tuple[list[int], list[int]]], params: SamplingParams) -> float:
    """Mean exact P(response) of `seqs` under the sampler `params` (`ulorl.evaluation.reference.score_pairs`)."""
    return sum(s.prob for s in score_pairs(model, seqs, params)) / len(seqs)


def _batch(seqs, pad_id):
    L = max(len(p) + len(r) for p, r in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    labels = torch.full((len(seqs), L), -100, dtype=torch.long)
    attn = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, (p, r) in enumerate(seqs):
        n = len(p) + len(r)
        ids[i, :n] = torch.tensor(p + r)
        labels[i, len(p) : n] = torch.tensor(r)
        attn[i, :n] = 1
    return ids, attn, labels


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Linear warm-up then cosine decay to 10% of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(cfg.steps - cfg.warmup_steps, 1)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def run_sft(model_cfg: ModelConfig, cfg: SFTConfig, out_dir: str | Path, progress: bool = True,
            check_params: SamplingParams | None = None) -> Path:
    """Train and save the warm-start model to `out_dir/model`; returns that folder. With `cfg.threads`, torch uses
    that many threads meanwhile, and the process's count again afterwards. `check_params`: the sampler of
    `sft.check_every`'s exact measure (the evaluation's; None: `SamplingParams()`'s defaults)."""
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        return _train(model_cfg, cfg, out_dir, progress, check_params or SamplingParams())
    finally:
        torch.set_num_threads(threads)


def _train(model_cfg: ModelConfig, cfg: SFTConfig, out_dir: str | Path, progress: bool,
           check_params: SamplingParams) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    tok = load_tokenizer(model_cfg.path, model_cfg.trust_remote_code)
    model = load_model(model_cfg.path, model_cfg.dtype, model_cfg.trust_remote_code)
    phases, checks, valid = _examples(tok, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(cfg.seed)
    p = _start(out, sft_settings(model_cfg, cfg, check_params), model, opt, gen, cfg)
    model.train()
    t0 = time.time() - p.elapsed_s
    stop = StopOnSignal()
    try:
        with open(out / METRICS_FILE, "a") as log, \
                tqdm(total=p.planned, initial=len(p.losses), desc="sft", disable=not progress) as bar:
            for i, phase in enumerate(phases):
                if i < p.phase:
                    continue
                if i > p.phase:
                    p.phase, p.taken, p.order, p.tail_left = i, 0, [], False
                while not p.met and _phase_goes_on(p, phase, cfg, bar):
                    lr = _step(model, opt, tok, gen, p, phase, cfg)
                    row = {"step": len(p.losses), "sft/loss": p.losses[-1], "sft/lr": lr,
                           "sft/phase": "short" if phase.short else "full"}
                    if not phase.short:
                        row.update(_checks(model, p, phase, checks, valid, check_params, cfg, bar))
                    log.write(json.dumps({**row, "timing_s/elapsed": time.time() - t0}) + "\n")
                    bar.set_postfix(loss=f"{p.losses[-1]:.3g}")
                    bar.update()
                    if stop.requested or (cfg.save_every and len(p.losses) % cfg.save_every == 0):
                        _save(out, log, model, opt, gen, p, bar, t0)
                    if stop.requested:
                        say(f"sft: stopped by a signal after step {len(p.losses)}; its state is saved in "
                            f"{out / STATE_FILE}")
                        raise SFTStopped(out, len(p.losses))
            _save(out, log, model, opt, gen, p, bar, t0)  # a kill while the model is written redoes no step
    finally:
        stop.restore()
    model_dir = out / "model"
    model.save_pretrained(model_dir, safe_serialization=True)
    tok.save_pretrained(model_dir)
    _plot_loss(p.losses, out / "loss.png")
    drop_state(out)
    return model_dir


class Phase(NamedTuple):
    """One phase of the SFT: the curriculum's short phase, or the full-law phase."""

    examples: list[tuple[list[int], list[int]]]  # (prompt tokens, response tokens)
    planned: int  # steps in the schedule (a phase may go on past them: `_phase_goes_on`)
    short: bool
    without_tail: list | None  # the examples once the tail leaves (`sft.tail_until_p_long`); None: no tail to leave
    buckets: tuple[list, list | None] | None  # `sft.bucketed`: the batches of `examples` and of `without_tail`

    def data(self, p: SFTProgress) -> tuple[list[tuple[list[int], list[int]]], list | None]:
        """The examples the phase trains on now, and their buckets (None: random batches)."""
        if p.tail_left:
            return self.without_tail, self.buckets and self.buckets[1]
        return self.examples, self.buckets and self.buckets[0]


def _phase(examples: list, planned: int, short: bool, without_tail: list | None, cfg: SFTConfig) -> Phase:
    def buckets(data):
        return bucket_batches([len(a) + len(b) for a, b in data], cfg.batch_tokens, cfg.batch_size)

    bucketed = (buckets(examples), without_tail and buckets(without_tail)) if cfg.bucketed else None
    return Phase(examples, planned, short, without_tail, bucketed)


def _phase_goes_on(p: SFTProgress, phase: Phase, cfg: SFTConfig, bar) -> bool:
    """Whether the phase trains another step: its planned steps, then as long as its rule says."""
    if p.taken < phase.planned:
        return True
    if phase.short:
        return _short_phase_goes_on(p.losses, p.taken, cfg, bar)
    return _full_phase_goes_on(len(p.losses), p.taken, phase.planned, cfg, bar)


def _step(model, opt, tok, gen: torch.Generator, p: SFTProgress, phase: Phase, cfg: SFTConfig) -> float:
    """One training step on a batch of the phase's examples (a random one, or the next bucket of the epoch); its
    loss goes into `p`. Returns the step's learning rate (held at the phase's last while it goes on past it)."""
    data, batches = phase.data(p)
    if batches is not None:
        if not p.order:  # a new epoch over the buckets, in random order
            p.order = torch.randperm(len(batches), generator=gen).tolist()
        idx = batches[p.order.pop()]
    else:
        idx = torch.randint(len(data), (cfg.batch_size,), generator=gen).tolist()
    ids, attn, labels = _batch([data[j] for j in idx], tok.pad_token_id)
    at = min(p.taken, phase.planned - 1)
    lr = lr_at(at if phase.short else cfg.short_steps + at, cfg)
    for g in opt.param_groups:
        g["lr"] = lr
    loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    p.losses.append(loss.item())
    p.taken += 1
    return lr


def _checks(model, p: SFTProgress, phase: Phase, checks: list, valid: list, params: SamplingParams,
            cfg: SFTConfig, bar) -> dict[str, float]:
    """The full phase's checks due after this step (`sft/p_valid`, `sft/p_long`), and what they decide: the SFT
    ends (`p.met`), or the tail leaves (`p.tail_left`, a new epoch over the other examples)."""
    row = {}
    periodic = bool(cfg.check_every) and p.taken % cfg.check_every == 0
    if valid and periodic:
        row["sft/p_valid"] = mean_p_reference(model, valid, params)
        p.met = _sft_ends(row["sft/p_valid"], len(p.losses), cfg)
        if p.met:  # the bar ends full: the schedule's length was a plan, not a promise
            bar.total = len(p.losses)
    tail_in = phase.without_tail is not None and not p.tail_left
    if checks and _p_long_due(periodic, tail_in, p.met, p.taken, phase.planned, len(p.losses), cfg):
        row["sft/p_long"] = mean_p_reference(model, checks, params)
        if tail_in and _tail_leaves(row["sft/p_long"], len(p.losses), cfg):
            p.tail_left, p.order = True, []
    return row


class SFTStopped(KeyboardInterrupt):
    """A signal stopped the SFT after a step, whose state is saved in `folder`: the same SFT continues from it."""

    def __init__(self, folder: Path, step: int) -> None:
        super().__init__(f"SFT stopped after step {step}; its state is in {folder / STATE_FILE}")
        self.folder, self.step = folder, step


def _examples(tok, cfg: SFTConfig) -> tuple[list[Phase], list, list]:
    """The SFT's phases and the validation problems of its checks (`sft/p_long`, `sft/p_valid`)."""
    full = sft_sequences(tok, cfg.num_examples, cfg.seed, cfg.max_size, cfg.task, cfg.alpha, cfg.max_response_tokens,
                         cfg.uniform)
    tail = tail_sequences(tok, round(cfg.tail * cfg.num_examples), cfg.seed, cfg.max_size + 1,
                          cfg.tail_max_size) if cfg.tail else []
    heads = head_sequences(tok, round(cfg.heads * cfg.num_examples), cfg.seed, cfg.head_max_size or cfg.max_size,
                           cfg.head_lines) if cfg.heads else []
    phases = [_phase(full + tail + heads, cfg.steps - cfg.short_steps, False, full + heads if tail else None, cfg)]
    if cfg.short_steps:  # the curriculum's first phase: short problems only
        short = sft_sequences(tok, cfg.num_examples, cfg.seed, min(cfg.short_max_size, cfg.max_size), cfg.task,
                              cfg.alpha, cfg.max_response_tokens, cfg.uniform)
        phases.insert(0, _phase(short + heads, cfg.short_steps, True, None, cfg))
    checks = check_sequences(tok, cfg) if cfg.check_every and cfg.task == BuiltinTask.ODOMETER.value else []
    valid = valid_sequences(tok, cfg) if cfg.until_p is not None else []
    return phases, checks, valid


def _start(out: Path, settings: dict, model, opt, gen, cfg: SFTConfig) -> SFTProgress:
    """The progress the SFT in `out` starts from: a fresh one (its settings recorded, metrics.jsonl emptied), or,
    when `out` holds the saved state of an SFT with the same settings, that state (restored into `model`, `opt` and
    `gen`; metrics.jsonl cut back to its steps). A state saved under other settings is refused, never overwritten."""
    drop_unfinished_saves(out)
    if has_state(out):
        changes = settings_changes(out, settings)
        if changes != []:
            which = f"other settings ({'; '.join(changes)})" if changes else "settings it does not record"
            raise SFTStateError(f"{out} holds the saved state of an SFT with {which}: continue it with its "
                                "settings, or choose another folder")
        p = load_state(out, model, opt, gen)
        _keep_lines(out / METRICS_FILE, len(p.losses))
        say(f"sft: continuing the interrupted SFT in {out} after its step {len(p.losses)} "
            f"(saved in {out / STATE_FILE})")
        return p
    record_settings(out, settings)
    (out / METRICS_FILE).write_text("")
    return SFTProgress(planned=cfg.steps)


def _save(out: Path, log, model, opt, gen, p: SFTProgress, bar, t0: float) -> None:
    """Save the SFT's state after its last step, once the metrics of that step are on disk."""
    log.flush()
    p.planned, p.elapsed_s = bar.total, time.time() - t0
    save_state(out, model, opt, gen, p)


def _keep_lines(path: Path, n: int) -> None:
    """Cut `path` back to its first `n` lines: the steps after a saved state were lost with the process."""
    lines = path.read_text().splitlines(keepends=True) if path.exists() else []
    if len(lines) < n:
        raise SFTStateError(f"{path} holds {len(lines)} steps, fewer than the {n} of the saved state beside it")
    path.write_text("".join(lines[:n]))


def sft_run_model(run_dir: str | Path) -> Path | None:
    """The model a `ulorl sft` run folder holds (RUN/model, a plain Hugging Face folder), or None when `run_dir`
    is not such a folder (a `ulorl train` run keeps its warm start in RUN/warm_start/model)."""
    model = Path(run_dir) / "model"
    return model if (model / "config.json").is_file() else None


def _short_phase_goes_on(losses: list[float], taken: int, cfg: SFTConfig, bar) -> bool:
    """Past its `sft.short_steps`, the short phase goes on while the mean loss of its last `SHORT_LOSS_WINDOW` steps
    is at least `sft.short_until_loss`, up to `sft.short_max_steps` (says so once when it goes on, once when done)."""
    if cfg.short_until_loss is None:
        return False
    recent = _recent(losses)
    if recent < cfg.short_until_loss:
        if taken > cfg.short_steps:
            say(f"sft: the short phase ends after {taken} steps, its loss over the last {SHORT_LOSS_WINDOW} steps "
                f"{recent:.4f} < sft.short_until_loss={cfg.short_until_loss}")
        return False
    if taken >= cfg.short_max_steps:
        say(f"sft: the short phase stops at sft.short_max_steps={cfg.short_max_steps}, its loss over the last "
            f"{SHORT_LOSS_WINDOW} steps still {recent:.4f} >= sft.short_until_loss={cfg.short_until_loss}")
        return False
    if taken == cfg.short_steps:
        say(f"sft: the short problems' loss over the last {SHORT_LOSS_WINDOW} steps is {recent:.4f} >= "
            f"sft.short_until_loss={cfg.short_until_loss}: the short phase goes on (at most "
            f"sft.short_max_steps={cfg.short_max_steps} steps)")
    bar.total += 1
    return True


def _full_phase_over(trained: int, taken: int, planned: int, cfg: SFTConfig) -> bool:
    """Whether the full phase ends after its `taken`-th step unless a check meets `sft.until_p` first: its `planned`
    steps are done and there is no `sft.until_p` to wait for, or the SFT has trained `sft.max_steps` in all."""
    return taken >= planned and (cfg.until_p is None or trained >= cfg.max_steps)


def _full_phase_goes_on(trained: int, taken: int, planned: int, cfg: SFTConfig, bar) -> bool:
    """Past its planned steps, the full phase goes on while no check has met `sft.until_p` (the caller stops at one
    that does), up to `sft.max_steps` steps of the SFT in all (`trained` so far); says so once when it goes on
    (at the planned end), once when it stops at the cap."""
    if _full_phase_over(trained, taken, planned, cfg):
        if cfg.until_p is not None:
            say(f"sft: stops at sft.max_steps={cfg.max_steps}, the validation problems' mean P(worked solution) "
                f"still under sft.until_p={cfg.until_p}")
        return False
    if taken == planned:
        say(f"sft: the validation problems' mean P(worked solution) is under sft.until_p={cfg.until_p} after "
            f"{trained} steps: the SFT goes on at its last learning rate (at most sft.max_steps={cfg.max_steps})")
    bar.total += 1
    return True


def sft_outcome(out_dir: str | Path) -> dict:
    """From an SFT folder's metrics.jsonl: `steps` trained and the last check's `p_long` (odometer's long
    problems, with `sft.check_every`) and `p_valid` (with `sft.until_p`); None without such checks."""
    rows = [json.loads(line) for line in (Path(out_dir) / "metrics.jsonl").read_text().splitlines()]
    last = {k: [r[f"sft/{k}"] for r in rows if f"sft/{k}" in r] for k in ("p_long", "p_valid")}
    return {"steps": len(rows), **{k: v[-1] if v else None for k, v in last.items()}}


def _p_long_due(periodic: bool, tail_in: bool, met: bool, taken: int, planned: int, trained: int,
                cfg: SFTConfig) -> bool:
    """Whether this full-phase step measures `sft/p_long`: every check while the measure can still drop the tail (or
    only logs, without `sft.tail_until_p_long`); once the tail has left, the SFT's last step only, for the value it
    ends at. A check that decides nothing costs as much as one that does (the long config: 64 solutions of 1-4k
    tokens, ~9 s, ten checks after the tail leaves) and changes nothing that is trained."""
    if cfg.tail_until_p_long is None or tail_in:
        return periodic
    return met or _full_phase_over(trained, taken, planned, cfg)


def _tail_leaves(p_long: float, step: int, cfg: SFTConfig) -> bool:
    """Whether a check's mean P(worked solution) meets `sft.tail_until_p_long` (says so when it does)."""
    if cfg.tail_until_p_long is None or p_long < cfg.tail_until_p_long:
        return False
    say(f"sft: the validation problems' mean P(worked solution) {p_long:.3f} >= sft.tail_until_p_long="
        f"{cfg.tail_until_p_long} at step {step}: the rest of the full phase trains without the tail")
    return True


def _sft_ends(p_valid: float, step: int, cfg: SFTConfig) -> bool:
    """Whether a check's mean P(worked solution) of the validation problems meets `sft.until_p` (says so when it
    does)."""
    if p_valid < cfg.until_p:
        return False
    say(f"sft: the validation problems' mean P(worked solution) {p_valid:.3f} >= sft.until_p={cfg.until_p} at step "
        f"{step}: the SFT ends there")
    return True


def _recent(losses: list[float]) -> float:
    window = losses[-SHORT_LOSS_WINDOW:]
    return sum(window) / len(window)


def _plot_loss(losses: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(losses) + 1), losses, lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (response tokens)")
    ax.set_yscale("log")
    ax.set_title("SFT warm start")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
