"""The cleaning steps of UloRL sections 3.3-3.4 (SPEC section 6): composable filters in a registry keyed by `CleanStep`.

Each step maps rows to one `Decision` per row: kept, changed (with the new row) or
removed, with a reason. Rule-based steps need no model; `too_easy` and
`consensus` sample k answers per problem from one or more models.
Deviations from the paper, which names the steps but not their rules: the text
heuristics are ours (see `rules.py`); proof questions are not converted;
`too_easy` drops a problem when any one given model gets all k samples right;
`consensus` groups sampled answers by exact (whitespace- and $-stripped) string match
before judging the majority answer against the reference with the reward verifier.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from ulorl.cleaning.rules import choice_conversion, long_answer_reason, multi_question_reason, shorten_answer
from ulorl.data.validate import RowSchema, get_path, is_missing, set_path

ScoreFn = Callable[[list[str], list[str], list[str]], list[float]]


class CleanStep(str, Enum):
    """Cleaning steps, in the order they always run (choices are converted before the multi-part check,
    whose "(a) ... (b) ..." pattern would otherwise drop inline multiple-choice questions)."""

    CHOICE_TO_SHORT = "choice_to_short"
    MULTI_QUESTION = "multi_question"
    SHORT_ANSWER = "short_answer"
    LONG_ANSWER = "long_answer"
    TOO_EASY = "too_easy"
    CONSENSUS = "consensus"


RULE_STEPS = [CleanStep.CHOICE_TO_SHORT, CleanStep.MULTI_QUESTION, CleanStep.SHORT_ANSWER, CleanStep.LONG_ANSWER]
MODEL_STEPS = [CleanStep.TOO_EASY, CleanStep.CONSENSUS]


class Action(str, Enum):
    KEPT = "kept"
    CHANGED = "changed"
    REMOVED = "removed"


@dataclass
class Decision:
    """What a step did to one row; `row` is the new row when changed, `note` a per-row detail."""

    action: Action = Action.KEPT
    reason: str = ""
    row: dict | None = None
    note: str = ""


@dataclass
class CleanOptions:
    """Knobs of the cleaning steps."""

    k: int = 8  # samples per problem and model (paper: 8)
    temperature: float = 0.85  # paper's sampling temperature
    max_new_tokens: int = 1024
    batch_size: int = 64  # prefixes per engine call
    seed: int = 0
    max_answer_chars: int = 64  # long_answer: longer reference answers are dropped
    max_list_items: int = 5  # long_answer: answers listing more items are dropped
    consensus_threshold: float = 0.75  # consensus: the majority answer's share of all samples needed to overrule

    def __post_init__(self) -> None:
        for name in ("k", "max_new_tokens", "batch_size", "max_answer_chars", "max_list_items"):
            if getattr(self, name) < 1:
                raise ValueError(f"clean.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.temperature < float("inf"):  # nan too
            raise ValueError(f"clean.temperature must be a finite number > 0, got {self.temperature}")
        if not 0 < self.consensus_threshold <= 1:
            raise ValueError(f"clean.consensus_threshold must be in (0, 1], got {self.consensus_threshold}")


@dataclass
class CleanContext:
    """Everything a step may need: where fields live, options, and (model steps) samplers and scoring."""

    schema: RowSchema
    options: CleanOptions = field(default_factory=CleanOptions)
    samplers: list = field(default_factory=list)  # callables (messages_list, k) -> list[list[str]], one per model
    score_fn: ScoreFn | None = None  # (responses, ground_truths, data_sources) -> rewards in {0, 1}
    extract_fn: Callable[[str], str | None] | None = None  # final answer of a response (consensus)

    def question(self, row: dict) -> str:
        p = get_path(row, self.schema.prompt_key)
        if isinstance(p, str):
            return p
        users = [m for m in p if m.get("role") == "user"] or list(p)
        return users[-1]["content"]

    def with_question(self, row: dict, text: str) -> dict:
        p = get_path(row, self.schema.prompt_key)
        if isinstance(p, str):
            return set_path(row, self.schema.prompt_key, text)
        msgs = [dict(m) for m in p]
        idx = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=len(msgs) - 1)
        msgs[idx]["content"] = text
        return set_path(row, self.schema.prompt_key, msgs)

    def messages(self, row: dict) -> list[dict]:
        p = get_path(row, self.schema.prompt_key)
        return [{"role": "user", "content": p}] if isinstance(p, str) else [dict(m) for m in p]

    def answer(self, row: dict) -> str:
        return str(get_path(row, self.schema.answer_key)).strip()

    def with_answer(self, row: dict, text: str) -> dict:
        return set_path(row, self.schema.answer_key, text)

    def data_source(self, row: dict) -> str:
        s = get_path(row, self.schema.data_source_key)
        return "unknown" if is_missing(s) or s is None else str(s)


def multi_question(rows: list[dict], ctx: CleanContext) -> list[Decision]:
    out = []
    for r in rows:
        why = multi_question_reason(ctx.question(r))
        out.append(Decision(Action.REMOVED, why) if why else Decision())
    return out


def choice_to_short(rows: list[dict], ctx: CleanContext) -> list[Decision]:
    out = []
    for r in rows:
        res = choice_conversion(ctx.question(r), ctx.answer(r))
        if res is None:
            out.append(Decision())
        elif res[0] == "convert":
            new = ctx.with_answer(ctx.with_question(r, res[1]), res[2])
            out.append(Decision(Action.CHANGED, "choice converted to short answer", new, f"answer -> {res[2]!r}"))
        else:
            out.append(Decision(Action.REMOVED, res[0].removeprefix("drop:")))
    return out


def short_answer(rows: list[dict], ctx: CleanContext) -> list[Decision]:
    out = []
    for r in rows:
        short, changes = shorten_answer(ctx.answer(r))
        if not short:
            out.append(Decision(Action.REMOVED, "empty answer after shortening"))
        elif changes:
            out.append(Decision(Action.CHANGED, "+".join(changes), ctx.with_answer(r, short), f"-> {short!r}"))
        else:
            out.append(Decision())
    return out


def long_answer(rows: list[dict], ctx: CleanContext) -> list[Decision]:
    o = ctx.options
    out = []
    for r in rows:
        why = long_answer_reason(ctx.answer(r), o.max_answer_chars, o.max_list_items)
        out.append(Decision(Action.REMOVED, why) if why else Decision())
    return out


def _sample_all(rows: list[dict], ctx: CleanContext, step: str) -> list[list[list[str]]]:
    """responses[model][row][sample] from every sampler."""
    if not ctx.samplers:
        raise ValueError(f"cleaning step {step!r} needs at least one model (--model PATH)")
    if ctx.score_fn is None:
        raise ValueError(f"cleaning step {step!r} needs a score function")
    msgs = [ctx.messages(r) for r in rows]
    return [s(msgs, ctx.options.k) for s in ctx.samplers]


def too_easy(rows: list[dict], ctx: CleanContext) -> list[Decision]:
    """Drop a problem when some model answers all k samples correctly."""
    if not rows:
        return []
    k = ctx.options.k
    per_model = _sample_all(rows, ctx, CleanStep.TOO_EASY.value)
    gts = [ctx.answer(r) for r in rows for _ in range(k)]
    srcs = [ctx.data_source(r) for r in rows for _ in range(k)]
    all_right = [False] * len(rows)
    notes = [""] * len(rows)
    for m, responses in enumerate(per_model):
        rewards = ctx.score_fn([x for g in responses for x in g], gts, srcs)
        for i in range(len(rows)):
            c = sum(float(x) > 0.5 for x in rewards[i * k : (i + 1) * k])
            if c == k and not all_right[i]:
                all_right[i], notes[i] = True, f"model {m}: {c}/{k} correct"
    return [Decision(Action.REMOVED, f"all {k} samples correct", note=n) if a else Decision()
            for a, n in zip(all_right, notes)]


def _norm(ans: str | None) -> str | None:
    if ans is None:
        return None
    a = "".join(ans.split()).replace("$", "")
    return a or None


def consensus(rows: list[dict], ctx: CleanContext) -> list[Decision]:
    """Drop a problem when the models' majority answer is confident and not equivalent to the reference."""
    if not rows:
        return []
    if ctx.extract_fn is None:
        raise ValueError("cleaning step 'consensus' needs an answer extractor")
    per_model = _sample_all(rows, ctx, CleanStep.CONSENSUS.value)
    cands: dict[int, tuple[str, int, int]] = {}
    for i in range(len(rows)):
        answers = [_norm(ctx.extract_fn(x)) for responses in per_model for x in responses[i]]
        votes = Counter(a for a in answers if a is not None)
        if votes:
            top, n = votes.most_common(1)[0]
            if n / len(answers) >= ctx.options.consensus_threshold:
                cands[i] = (top, n, len(answers))
    idx = sorted(cands)
    rewards = ctx.score_fn([f"\\boxed{{{cands[i][0]}}}" for i in idx], [ctx.answer(rows[i]) for i in idx],
                           [ctx.data_source(rows[i]) for i in idx]) if idx else []
    out = [Decision() for _ in rows]
    for i, r in zip(idx, rewards):
        if float(r) <= 0.5:
            top, n, total = cands[i]
            out[i] = Decision(Action.REMOVED, "consensus disagrees with the reference",
                              note=f"majority answer {top!r} in {n}/{total} samples")
    return out


StepFn = Callable[[list[dict], CleanContext], list[Decision]]
STEPS: dict[CleanStep, StepFn] = {
    CleanStep.MULTI_QUESTION: multi_question,
    CleanStep.CHOICE_TO_SHORT: choice_to_short,
    CleanStep.SHORT_ANSWER: short_answer,
    CleanStep.LONG_ANSWER: long_answer,
    CleanStep.TOO_EASY: too_easy,
    CleanStep.CONSENSUS: consensus,
}


def parse_steps(steps: str | list[str | CleanStep]) -> list[CleanStep]:
    """'a,b,c' or a list of names -> steps in pipeline order (`CleanStep` order, whatever order they are given
    in); an unknown name fails listing the valid ones."""
    names = [s.strip() for s in steps.split(",") if s.strip()] if isinstance(steps, str) else list(steps)
    valid = [s.value for s in CleanStep]
    out = []
    for n in names:
        v = n.value if isinstance(n, CleanStep) else n
        if v not in valid:
            raise ValueError(f"unknown cleaning step {v!r}; valid steps: {valid}")
        out.append(CleanStep(v))
    order = list(CleanStep)
    return sorted(dict.fromkeys(out), key=order.index)
