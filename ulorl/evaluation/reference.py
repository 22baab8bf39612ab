"""The exact probability that a sampler writes a given reference response, from one forward pass.

For a task whose correct answer has one worked form (the built-in `odometer`: every line restates the
whole state, so a correct response is the worked solution token for token), the probability that a
policy answers correctly under given sampling settings is, up to answers that reach the right final
value through cancelling errors, the probability that the sampler writes the reference::

    P(reference) = prod_t q(y_t | x, y_<t),   q = softmax(filter(logits / temperature))

with `filter` the sampler's own top-k / top-p (`ulorl.rollout.engines.torch.sampler.filter_logits`).
This is avg@infinity without sampling noise: a paired comparison of two models on it has only the
problems' variance, where avg@k adds the binomial noise of k samples (one sample's right/wrong has a
standard deviation of sqrt(p (1 - p)), 0.22 at p = 0.95). It is a lower bound of the accuracy (right answers through
other token paths are not counted) and needs a reference that is the only correct form; `EOS` ends the
reference, as it ends a sampled answer.

Not in the paper, which reports sampled avg@k only; `ulorl.evaluation.evaluator` does that here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ulorl.config.evaluation import EvalConfig
from ulorl.data.batching import bucket_batches
from ulorl.errors import ConfigError
from ulorl.rollout.engines.base import SamplingParams
from ulorl.rollout.engines.torch.sampler import filter_logits


@torch.no_grad()
def reference_logprobs(model: torch.nn.Module, prompt_ids: list[int], response_ids: list[int],
                       params: SamplingParams, chunk: int = 1024) -> torch.Tensor:
    """Log-probability of each reference token under the sampler's distribution.

    Args:
        model: a causal LM with `base_model` and `get_output_embeddings()` (transformers' layout).
        prompt_ids: the rendered prompt's `P` token ids; response_ids: the reference's `R >= 1` ids (EOS included
            if the answer must end there).
        params: temperature, top_k, top_p as the sampler uses them; greedy: 0 where the token is the argmax,
            else -inf.
        chunk: response positions per `(chunk, V)` logits block.
    Returns:
        `(R,)` float32 log q(y_t | x, y_<t): -inf where the sampler can never pick the token (filtered out).
    """
    if not response_ids:
        raise ValueError("reference_logprobs needs a non-empty response")
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(response_ids)], dtype=torch.long, device=device)
    hidden = model.base_model(input_ids=ids, use_cache=False).last_hidden_state[0]  # (P + R, d)
    # the hidden state at position i predicts token i + 1
    return _token_logprobs(model, hidden[len(prompt_ids) - 1 : ids.shape[1] - 1], ids[0, len(prompt_ids):], params,
                           chunk)


def _token_logprobs(model: torch.nn.Module, pred: torch.Tensor, targets: torch.Tensor, params: SamplingParams,
                    chunk: int) -> torch.Tensor:
    """pred `(N, d)` hidden states, targets `(N,)` the tokens they predict -> `(N,)` float32 log q(target) under
    the sampler `params`, through the LM head `chunk` rows at a time (a `(chunk, V)` logits block)."""
    head = model.get_output_embeddings()
    out = []
    for lo in range(0, pred.shape[0], chunk):
        logits = head(pred[lo : lo + chunk].to(head.weight.dtype)).float()  # (c, V)
        tgt = targets[lo : lo + chunk, None]  # (c, 1)
        if params.greedy:
            lp = torch.where(logits.argmax(-1, keepdim=True) == tgt, 0.0, -math.inf)
        else:
            filtered = filter_logits(logits / params.temperature, params.top_k, params.top_p)
            lp = torch.log_softmax(filtered, dim=-1).gather(-1, tgt)
        out.append(lp.squeeze(-1))
    return torch.cat(out).float()


@dataclass
class ReferenceScore:
    """One problem's reference under a sampler: `logprob` = log P(reference) (a sum over its `tokens`),
    `prob` = exp(logprob), `slips` = sum_t (1 - q(y_t)): the expected number of tokens that leave the
    reference if each were drawn alone with the reference before it."""

    tokens: int
    logprob: float
    prob: float
    slips: float


def score_reference(model: torch.nn.Module, prompt_ids: list[int], response_ids: list[int],
                    params: SamplingParams, chunk: int = 1024) -> ReferenceScore:
    """`reference_logprobs` summed into a `ReferenceScore`."""
    return _summed(reference_logprobs(model, prompt_ids, response_ids, params, chunk))


def _summed(lp: torch.Tensor) -> ReferenceScore:
    """`(R,)` log q of a reference's tokens -> its `ReferenceScore` (summed in float64)."""
    lp = lp.double()
    total = float(lp.sum())
    return ReferenceScore(tokens=lp.shape[0], logprob=total, prob=math.exp(total), slips=float((1.0 - lp.exp()).sum()))


def check_references(records: list, source: str, key: str) -> None:
    """Raise `ConfigError` (prefixed with `key`, the setting that asked for the measure) naming the first row of
    `records` (from `source`) without `extra_info.solution`."""
    for i, rec in enumerate(records):
        if not isinstance(rec.extra_info, dict) or not isinstance(rec.extra_info.get("solution"), str):
            raise ConfigError(f"{key}: {source}: row {i} (prompt id {rec.prompt_id}) has no extra_info.solution; the "
                              f"exact measure needs each row's worked solution as a string")


def referenced_rows(cfg: EvalConfig, records: list, source: str, key: str) -> list:
    """The held-out rows the exact measure scores (`cfg.referenced`), each checked to carry its worked solution:
    `ConfigError` names `source`, the first bad row and `key` (the setting that asked for the measure)."""
    rows = cfg.referenced(records, source)
    check_references(rows, source, key)
    return rows


def score_pairs(model: torch.nn.Module, pairs, params: SamplingParams, token_budget: int = 4096,
                chunk: int = 1024, progress=None) -> list[ReferenceScore]:
    """`score_reference` of each (prompt ids, response ids) of the iterable `pairs`, in their order, with `model` in
    eval mode (its mode is restored after); `progress(n)`, if given, is called as each batch of n pairs is done.

    The pairs go through the model in batches (`ulorl.data.batching.bucket_batches`: sorted by length, at most
    `token_budget` tokens a batch with its padding), one forward each. The batch is padded on the right and needs no
    attention mask: in a causal model no position reads a later one, so a pair's own positions see only its tokens.
    The sums equal `score_reference`'s, one pair at a time, up to float rounding (other matrix shapes). On the demo's
    256 SFT validation problems (`sft.until_p`'s check, 2 Zen 1 cores): 4.4x faster, probabilities within 1e-11 of
    one pair at a time (within 4e-7 at budgets of 1,024 to 8,192 tokens; `benchmarks/bench_exact_measure.py`)."""
    pairs = [(list(p), list(r)) for p, r in pairs]
    if any(not r for _, r in pairs):
        raise ValueError("score_pairs needs a non-empty response in every pair")
    lengths = [len(p) + len(r) for p, r in pairs]
    device = next(model.parameters()).device
    scores: list[ReferenceScore | None] = [None] * len(pairs)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in bucket_batches(lengths, token_budget, len(pairs)):
                ids = torch.zeros((len(batch), max(lengths[i] for i in batch)), dtype=torch.long)
                rows, cols = [], []  # the positions whose hidden states predict each pair's response tokens
                for row, i in enumerate(batch):
                    prompt, response = pairs[i]
                    ids[row, : lengths[i]] = torch.tensor(prompt + response)
                    rows += [row] * len(response)
                    cols += range(len(prompt) - 1, lengths[i] - 1)
                ids, rows, cols = ids.to(device), torch.tensor(rows, device=device), torch.tensor(cols, device=device)
                hidden = model.base_model(input_ids=ids, use_cache=False).last_hidden_state  # (B, L, d)
                lp = _token_logprobs(model, hidden[rows, cols], ids[rows, cols + 1], params, chunk)
                for i, part in zip(batch, lp.split([len(pairs[i][1]) for i in batch])):
                    scores[i] = _summed(part)
                if progress is not None:
                    progress(len(batch))
    finally:
        model.train(was_training)
    return scores


def score_references(model: torch.nn.Module, tokenizer, records: list, params: SamplingParams, eos_id: int,
                     progress: bool = False, desc: str = "exact held-out P(reference)") -> list[ReferenceScore]:
    """Each record's worked solution (`extra_info.solution`, tokenized as the SFT data is) plus `eos_id`, scored
    under `params` by `score_pairs`; `desc` labels the progress bar."""
    from tqdm.auto import tqdm

    pairs = [(rec.prompt_tokens, tokenizer(rec.extra_info["solution"], add_special_tokens=False)["input_ids"]
              + [eos_id]) for rec in records]
    with tqdm(total=len(pairs), desc=desc, disable=not progress, leave=False) as bar:
        return score_pairs(model, pairs, params, progress=bar.update)


def score_eval_references(model: torch.nn.Module, tokenizer, records: list, cfg: EvalConfig,
                          progress: bool = False) -> list[ReferenceScore]:
    """`score_references` under the evaluation protocol `cfg`'s sampling, with the model's first EOS id."""
    from ulorl.models import eos_token_ids

    return score_references(model, tokenizer, records, cfg.sampling(), eos_token_ids(model, tokenizer)[0], progress)


def reference_means(scores: list[ReferenceScore], long_tokens: int) -> dict[str, float]:
    """`reference/p_correct`, the mean P(reference) of `scores`, `reference/p_correct_long`, the mean over those of
    at least `long_tokens` tokens (left out when there are none), and `reference/problems`, how many."""
    out = {"reference/p_correct": sum(s.prob for s in scores) / len(scores), "reference/problems": len(scores)}
    long = [s.prob for s in scores if s.tokens >= long_tokens]
    if long:
        out["reference/p_correct_long"] = sum(long) / len(long)
    return out
