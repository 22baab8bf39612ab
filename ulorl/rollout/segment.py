"""SegmentRollout: one round of Algorithm 1 (UloRL segment rollout).

A round (1) takes every unfinished sample plus enough new prompts (G samples each)
to bring the decode batch to its target, (2) decodes at most L/M new tokens for
each, all with the *current* weights, and (3) routes each sample
by its stop reason: EOS -> finished; global cap L reached -> finished as truncated;
segment cap -> back to the unfinished pool.

A continued sample is prefilled again from its full prefix when the weights changed since its last segment
(the old KV cache belongs to old weights). Between the rounds of one step they did not: an engine that keeps
K/V between calls (`keeps_rows`, the torch engine) is asked to keep the unfinished rows' K/V, and continues
them without prefilling; `end_step` gives back what is still kept when the step's rounds are over.

With M = 1 every sample finishes in its first round: ordinary synchronous rollout.
"""

from __future__ import annotations

from dataclasses import dataclass

from ulorl.rollout.engines.base import Engine, SamplingParams
from ulorl.rollout.pools import UnfinishedPool
from ulorl.rollout.prompt_source import PromptSource
from ulorl.trajectory import StopReason, Trajectory


class SampleError(RuntimeError):
    """An engine or reward failure, naming the samples and groups it concerns (`.sample_ids`, `.group_ids`)."""

    def __init__(self, what: str, trajs: list[Trajectory], cause: BaseException, limit: int = 8) -> None:
        self.sample_ids = [t.sample_id for t in trajs]
        self.group_ids = list(dict.fromkeys(t.group_id for t in trajs))
        shown = ", ".join(self.sample_ids[:limit]) + (f" (+{len(trajs) - limit} more)" if len(trajs) > limit else "")
        super().__init__(f"{what} failed on {len(trajs)} sample(s) of group(s) {', '.join(self.group_ids[:limit])}"
                         f"{' ...' if len(self.group_ids) > limit else ''}: {shown}: "
                         f"{cause.__class__.__name__}: {cause}")


@dataclass
class RoundResult:
    finished: list[Trajectory]
    new_prompts: int
    continued: int
    decoded_tokens: int
    reprefill_tokens: int  # response tokens of continued samples that the engine prefilled again
    max_staleness: int  # max over finished samples of (version now - version of their first segment)
    decode_slots: int  # batch rows x decode iterations of this round
    prefill_tokens: int = 0  # prefix tokens the engine prefilled (prompts + re-prefilled responses)
    prefill_padded_tokens: int = 0  # the same, padding included (engines that pad: hf)
    procs_busy_s: float = 0.0  # engine processes (`rollout.torch.procs` > 1): children's seconds to their replies
    procs_wait_s: float = 0.0  # ... and the seconds they waited for the slowest child (`ProcessEngine.stats`)


class SegmentRollout:
    def __init__(self, engine: Engine, prompts: PromptSource, params: SamplingParams, *, group_size: int,
                 decode_batch: int, max_response_len: int, num_segments: int, seed: int = 0) -> None:
        if max_response_len % num_segments:
            raise ValueError(f"num_segments={num_segments} must divide max_response_len={max_response_len}")
        self.engine, self.prompts, self.params = engine, prompts, params
        self.G, self.decode_batch, self.L = group_size, decode_batch, max_response_len
        self.segment_len = max_response_len // num_segments
        self.seed = seed
        self.rounds = 0  # counts rounds across the run; part of the resumable state

    def num_new_prompts(self, n_unfinished: int) -> int:
        """New prompt draws that keep the decode batch at its target (at least one if the batch is empty)."""
        n = max(0, (self.decode_batch - n_unfinished) // self.G)
        return max(n, 1) if n_unfinished == 0 else n

    def round(self, unfinished: UnfinishedPool, version: int, step: int) -> RoundResult:
        continued = unfinished.take_all()
        draws = self.prompts.next(self.num_new_prompts(len(continued)))
        fresh = [
            Trajectory(sample_id=f"{d.group_id}/{k}", group_id=d.group_id, prompt_id=d.record.prompt_id,
                       prompt_tokens=list(d.record.prompt_tokens), ground_truth=d.record.ground_truth,
                       data_source=d.record.data_source, born_step=step, extra_info=dict(d.record.extra_info))
            for d in draws for k in range(self.G)
        ]
        batch = continued + fresh
        st = self.engine.stats
        pre0, pad0 = st.prefill_tokens, st.prefill_padded_tokens
        busy0, wait0 = st.extra.get("procs_busy_s", 0.0), st.extra.get("procs_wait_s", 0.0)
        keep = {"keep": True} if getattr(self.engine, "keeps_rows", False) else {}
        try:
            outs = self.engine.generate([t.prompt_tokens + t.response_tokens for t in batch], self.segment_len,
                                        self.params, seed=self.seed * 1_000_003 + self.rounds, **keep)
        except Exception as e:
            raise SampleError(f"rollout round {self.rounds} (step {step + 1}): the engine", batch, e) from e
        self.rounds += 1
        reprefill = sum(t.response_len for t, out in zip(continued, outs) if not out.resumed)
        finished, decoded, staleness = [], 0, 0
        for traj, out in zip(batch, outs):
            traj.append_segment(out.tokens, out.logprobs, version)
            decoded += len(out.tokens)
            if out.eos:
                traj.stop_reason = StopReason.EOS.value
            elif traj.response_len >= self.L:
                traj.stop_reason = StopReason.TRUNCATED.value
            else:
                traj.stop_reason = StopReason.SEGMENT_CAP.value
                unfinished.add(traj)
                continue
            finished.append(traj)
            staleness = max(staleness, version - traj.segments[0].version)
        iterations = max((len(o.tokens) for o in outs), default=0)
        st = self.engine.stats
        return RoundResult(finished=finished, new_prompts=len(draws), continued=len(continued),
                           decoded_tokens=decoded, reprefill_tokens=reprefill, max_staleness=staleness,
                           decode_slots=len(batch) * iterations, prefill_tokens=st.prefill_tokens - pre0,
                           prefill_padded_tokens=st.prefill_padded_tokens - pad0,
                           procs_busy_s=st.extra.get("procs_busy_s", 0.0) - busy0,
                           procs_wait_s=st.extra.get("procs_wait_s", 0.0) - wait0)

    def end_step(self) -> None:
        """The step's rounds are over: the weights change next, so K/V kept for unfinished rows is of no use."""
        release = getattr(self.engine, "release_kept", None)
        if release is not None:
            release()

    def state_dict(self) -> dict:
        return {"rounds": self.rounds}

    def load_state_dict(self, state: dict) -> None:
        self.rounds = state["rounds"]
