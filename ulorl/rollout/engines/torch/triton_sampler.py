"""The rollout's sampling step as one Triton kernel on CUDA: temperature only (no top-k / top-p), two passes over
each row's logits in their own dtype and a third over one chunk of them.

`sampler.sample_tokens` makes ~10 passes over `(B, V)` float32 / float64 tensors per step (the float32 copy, the
scaled logits, log-softmax, softmax, the float64 cumulative sum): at the Qwen2.5-0.5B shape's 151,936 tokens and
256 rows ~1.6-1.9 GB, ~0.4 ms at 4 TB/s, a fifth of the 256 x 2k decode step's bandwidth floor. This kernel reads
the bfloat16 logits about twice (~160 MB), one program per row:

1. the row's largest scaled logit `mx` (`logits / temperature` in float32);
2. the weight of each chunk of `WIDE` tokens, `sum_j exp(x_j - mx)` with each weight in float32 as softmax
   computes it, summed in float64 and kept in registers; their cumulative sum, whose last entry is the total `W`;
3. the inverse CDF: the chunk whose cumulative weight first passes `u * W` (`u` the row's uniform,
   `sampler.row_uniforms`), then within that chunk only, the first token whose cumulative weight (float64) passes
   it. A draw past the last cumulative value (rounding) takes the last token of positive weight, so a token of
   probability 0 is never chosen. Its behaviour log-prob is `x_tok - mx - log W`.

This is `sample_tokens`'s draw with the normalisation left out (the cumulative weights are its float64 CDF times
`W`, up to the rounding of each float32 probability and of the float64 sums' order), so it samples the same
distribution with the same uniform: the token can differ only where `u * W` falls within rounding of a boundary
between two tokens (a relative 1e-7 event at most), and the log-prob by ~1e-7 (the float64 total's logarithm,
more accurate than a float32 sum's). Greedy, top-k and top-p sampling (evaluation) keep `sample_tokens`.

Runs on CUDA; on CPU only under Triton's interpreter (the tests). `FusedSampler` holds the choice for an engine:
its warm-up compiles the kernel and checks it against `sample_tokens` on four rows, and a call that fails (no
Triton, a compile error) or a failed check turns it off for good, with a warning: `sample_tokens` from then on.
"""

from __future__ import annotations

import warnings

import torch
import triton
import triton.language as tl

from ulorl.rollout.engines.base import SamplingParams
from ulorl.rollout.engines.torch.triton_interpreter import patch_interpreter
from ulorl.rollout.engines.torch.triton_launch import Launch

patch_interpreter()

WIDE = 8192  # logits per iteration of the first two passes, and the chunks of the third
BLOCK = 2048  # logits per iteration within the third pass's chunk (its float64 cumulative sums take registers)
NUM_WARPS = 8
NUM_STAGES = 3


@triton.jit
def _sample_kernel(LOGITS, U, TOK, LP, s_row, V, temperature,
                   WIDE: tl.constexpr, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = LOGITS + row * s_row
    wide = tl.arange(0, WIDE)
    top = tl.full([WIDE], float("-inf"), tl.float32)
    for start in range(0, V, WIDE):
        x = tl.load(base + start + wide, mask=start + wide < V, other=float("-inf")).to(tl.float32) / temperature
        top = tl.maximum(top, x)
    mx = tl.max(top, 0)
    # each chunk's weight, float64, kept in registers
    chunk = tl.arange(0, CHUNKS)
    sums = tl.zeros([CHUNKS], tl.float64)
    for c in range(0, tl.cdiv(V, WIDE)):
        idx = c * WIDE + wide
        x = tl.load(base + idx, mask=idx < V, other=float("-inf")).to(tl.float32) / temperature
        sums = tl.where(chunk == c, tl.sum(tl.exp(x - mx).to(tl.float64), 0), sums)  # outside the row: exp(-inf) = 0
    cum = tl.cumsum(sums, 0)
    total = tl.max(cum, 0)  # the last entry: `cum` never decreases
    target = tl.load(U + row) * total
    # the chunk the draw falls in: the first whose cumulative weight passes the target (rounding: the last of weight)
    first = tl.min(tl.where(cum > target, chunk, CHUNKS), 0)
    c = tl.where(first < CHUNKS, first, tl.max(tl.where(sums > 0, chunk, -1), 0))
    run = tl.sum(tl.where(chunk < c, sums, 0.0), 0)
    # within it, the first token whose cumulative weight passes the target (rounding: its last token of weight)
    offs = tl.arange(0, BLOCK)
    found = V
    last = -1
    for start in range(0, WIDE, BLOCK):
        idx = c * WIDE + start + offs
        x = tl.load(base + idx, mask=idx < V, other=float("-inf")).to(tl.float32) / temperature
        w = tl.exp(x - mx).to(tl.float64)
        found = tl.minimum(found, tl.min(tl.where((run + tl.cumsum(w, 0) > target) & (idx < V), idx, V), 0))
        last = tl.maximum(last, tl.max(tl.where(w > 0, idx, -1), 0))
        run += tl.sum(w, 0)
    tok = tl.where(found < V, found, last)
    x_tok = tl.load(base + tok).to(tl.float32) / temperature
    tl.store(TOK + row, tok.to(tl.int64))
    tl.store(LP + row, (x_tok - mx - tl.log(total).to(tl.float32)).to(tl.float32))


def sample_launch(logits: torch.Tensor, temperature: float, uniforms: torch.Tensor
                  ) -> tuple[Launch, torch.Tensor, torch.Tensor]:
    """The launch of one call and the tokens and log-probs it fills: `triton_aot.py` compiles the same launch."""
    if logits.stride(-1) != 1:
        raise ValueError("fused sampler: the logits need a contiguous last (vocabulary) dimension")
    b, v = logits.shape
    tokens = torch.empty(b, dtype=torch.long, device=logits.device)
    logprobs = torch.empty(b, dtype=torch.float32, device=logits.device)
    args = (logits, uniforms.to(device=logits.device, dtype=torch.float64), tokens, logprobs, logits.stride(0), v,
            float(temperature))
    chunks = triton.next_power_of_2(triton.cdiv(v, WIDE))
    kwargs = dict(WIDE=WIDE, BLOCK=BLOCK, CHUNKS=chunks, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return Launch(_sample_kernel, (b,), args, kwargs), tokens, logprobs


def fused_sample(logits: torch.Tensor, temperature: float, uniforms: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """logits `(B, V)` (any float dtype), uniforms `(B,)` in [0, 1) -> tokens `(B,)` long and their behaviour
    log-probs `(B,)` float32 (`log_softmax(logits / temperature)` of the token)."""
    launch, tokens, logprobs = sample_launch(logits, temperature, uniforms)
    launch.run()
    return tokens, logprobs


class FusedSampler:
    """An engine's fused sampling step: `fused_sample` for temperature sampling with the rows' uniforms, None
    otherwise (greedy, top-k or top-p: the caller samples with `sample_tokens`), and None for good once a call has
    failed, after one warning."""

    def __init__(self) -> None:
        self.failed: str | None = None
        self.calls = 0  # steps sampled by the kernel

    @staticmethod
    def takes(params: SamplingParams) -> bool:
        """Whether the kernel samples with these settings: temperature only (no greedy, top-k or top-p)."""
        return not (params.greedy or params.top_k > 0 or params.top_p < 1.0)

    def __call__(self, logits: torch.Tensor, params: SamplingParams, uniforms: torch.Tensor | None):
        if self.failed is not None or uniforms is None or not self.takes(params):
            return None
        try:
            out = fused_sample(logits, params.temperature, uniforms)
            self.calls += 1
            return out
        except Exception as e:  # a slower sampler, not a dead run
            self.failed = f"{type(e).__name__}: {str(e)[:400]}"
            warnings.warn(f"torch engine: the fused Triton sampler failed ({self.failed}); sampling with "
                          f"sampler.sample_tokens from now on", stacklevel=2)
            return None

    def warm_up(self, vocab: int, dtype: torch.dtype, device: torch.device) -> None:
        """Compile the kernel for logits of `vocab` tokens in `dtype` and check it: four rows of random logits with
        fixed uniforms must give `sample_tokens`' tokens and log-probs (within 1e-4), or the engine samples with
        `sample_tokens` from now on, after a warning. Not counted in `calls`; the first step of a timed or long call
        then pays no compilation."""
        from ulorl.rollout.engines.torch.sampler import sample_tokens

        gen = torch.Generator(device="cpu").manual_seed(0)
        logits = (torch.randn(4, vocab, generator=gen) * 3).to(device, dtype)
        uniforms = torch.tensor([0.1, 0.4, 0.7, 0.95], dtype=torch.float64, device=device)
        params, calls = SamplingParams(temperature=1.0), self.calls
        got = self(logits, params, uniforms)
        self.calls = calls
        if got is None:  # the call failed (warned)
            return
        want = sample_tokens(logits, params, uniforms)
        if not (torch.equal(got[0], want[0]) and torch.allclose(got[1], want[1], atol=1e-4, rtol=0)):
            self.failed = (f"its check at warm-up chose tokens {got[0].tolist()} with log-probs {got[1].tolist()}, "
                           f"sample_tokens {want[0].tolist()} with {want[1].tolist()}")
            warnings.warn(f"torch engine: the fused Triton sampler is off ({self.failed}); sampling with "
                          f"sampler.sample_tokens", stacklevel=2)
