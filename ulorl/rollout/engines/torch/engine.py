"""The torch engine (default): continuous batching over a paged KV cache, in plain PyTorch.

Built for ultra-long outputs, on CPU and CUDA, with no dependency beyond torch and the model's transformers
modules. One role per file, as in nano-vllm's engine/:

- `sequence.py`: a row's state in one record (prefix, tokens and log-probs so far, block table);
- `scheduler.py`: admission (rows and blocks), preemption of the newest rows when the pool runs out,
  retirement, prompt sharing within a group;
- `block_manager.py` and `kv_cache.py`: fixed-size blocks from one pool bounded by `rollout.kv_cache_gib`,
  with reference counts; on CPU the pool's memory is committed only where blocks are written;
- `runner.py` and `attention.py`: packed prefill and one-token decode over the model's own modules, one
  attention call per layer reading each row's own blocks (split-K over the pool: the CPU default);
- `prefill_attention.py`: the packed prefill's causal attention (per-length SDPA; torch's `varlen_attn` on CUDA);
- `table_attention.py` and `graph_decoder.py`: the same decode with fixed shapes over padded block tables
  (flex_attention, our Triton kernel `triton_decode.py`, or a gather), captured as CUDA graphs per batch bucket
  and replayed (the CUDA default);
- `sampler.py`: temperature / top-k / top-p with one random stream per row; on CUDA, temperature sampling in one
  Triton kernel (`triton_sampler.py`);
- `kept_rows.py`: with `generate(..., keep=True)`, the K/V of rows stopped at `max_new_tokens`, kept for the next
  call that continues them under the same weights (segment rollout's rounds within a step).

The contract is every engine's (`base.py`): behaviour log-probs are `log_softmax(logits / T)` of the sampled
token, in float32 from the logits, before top-k/top-p; runs with a seed reproduce (the schedule depends only
on the inputs, never on timing, and each row's draws only on (seed, row, step)). Weights are the model's own
parameters when `dtype` is the model's (shared with the learner without a copy), otherwise a copy in `dtype`
(e.g. bfloat16) that `sync_weights` refreshes.
"""

from __future__ import annotations

import copy
import logging
import time
import warnings
from collections.abc import Callable

import torch

from ulorl.errors import ConfigError, check_choice
from ulorl.rollout.engines.base import EngineStats, GenerationOutput, SamplingParams, check_prefixes, load_weights
from ulorl.rollout.engines.registry import DecodeAttention, PrefillAttention
from ulorl.rollout.engines.torch.block_manager import BlockManager
from ulorl.rollout.engines.torch.graph_decoder import GraphMode, TableDecoder
from ulorl.rollout.engines.torch.kept_rows import KeptRows, weights_version
from ulorl.rollout.engines.torch.kv_cache import GIB, PagedKVCache, check_budget, physical_memory_bytes, pool_blocks
from ulorl.rollout.engines.torch.prefill_attention import prefill_backend, varlen_refused, varlen_unavailable
from ulorl.rollout.engines.torch.runner import ModelRunner
from ulorl.rollout.engines.torch.scheduler import Scheduler
from ulorl.rollout.engines.torch.table_attention import table_backend, triton_runs_on

log = logging.getLogger(__name__)  # under `ulorl.rollout`, whose INFO lines a run prints (`run/console.py`)

# measured fastest on CPU (docs/benchmarks.md); on CUDA the fixed-shape path that CUDA graphs capture, flex as the
# library kernel that reads blocks in place (the fastest of the four paths on one H200: docs/scale.md)
DEFAULT_DECODE_ATTENTION = {"cpu": DecodeAttention.SPLIT_K, "cuda": DecodeAttention.FLEX}
# tokens per KV block by device type: on CPU 32 measured within noise of 64 and 128 for the decode attention
# (docs/benchmarks.md) with less waste per row; on CUDA 64, a multiple of flex decoding's KV tile (a block
# size is a tile size there: smaller blocks, smaller tiles)
BLOCK_SIZES = {"cpu": 32, "cuda": 64}
# full blocks a row's consecutive run needs to be read as one view in its own attention call (`scheduler.py`);
# by device type, 0: never (on CUDA one more call costs more than reading many blocks in the batched one)
RUN_MIN_BLOCKS = {"cpu": 8}


def block_size_for(device_type: str, block_size: int | None = None) -> int:
    """The KV block size of an engine on `device_type`: `block_size` (`rollout.torch.block_size`) when given."""
    return block_size or BLOCK_SIZES.get(device_type, 16)


def check_attention_paths(decode: str, prefill: str, device: torch.device, dtype: torch.dtype,
                          head_dim: int) -> None:
    """`ConfigError` when `rollout.torch.decode_attention` = `decode` or `prefill_attention` = `prefill` names a path
    that cannot run on `device` for a model of `dtype` and `head_dim`: what the engine refuses at start, known from
    the model's config before any weight loads (a run checks it before its SFT). `auto` always runs."""
    check_choice("rollout.torch.decode_attention", decode, DecodeAttention)
    check_choice("rollout.torch.prefill_attention", prefill, PrefillAttention)
    if DecodeAttention(decode) is DecodeAttention.TRITON and not triton_runs_on(device.type):
        raise ConfigError(f"rollout.torch.decode_attention=triton runs its kernel on CUDA (this engine's device: "
                          f"{device.type}); elsewhere only under Triton's interpreter (TRITON_INTERPRET=1, a slow "
                          f"reference for tests). On CPU use split_k, the fast path there")
    if PrefillAttention(prefill) is PrefillAttention.VARLEN and (why := varlen_unavailable(device, dtype, head_dim)):
        raise varlen_refused(why)


def _fused_sampler():
    """A `triton_sampler.FusedSampler`, or None where Triton is not installed (with a line in the run's log)."""
    try:
        from ulorl.rollout.engines.torch.triton_sampler import FusedSampler
    except ImportError as e:
        log.info(f"torch engine: no fused sampler ({e}); sampling with sampler.sample_tokens")
        return None
    return FusedSampler()


class TorchEngine:
    """Continuous-batching engine over a Llama-family transformers model."""

    continuous_batching = True  # see `Engine`: callers may send every prefix in one call
    keeps_rows = True  # `generate(..., keep=True)` keeps unfinished rows' K/V for the next call (`kept_rows.py`)
    scheduler_cls = Scheduler  # benchmarks substitute a subclass (e.g. forced EOS from a length schedule)

    def __init__(self, model, eos_ids: list[int], max_batch: int = 256, kv_cache_gib: float = 4.0,
                 prefill_tokens: int = 16384, block_size: int | None = None, dtype: torch.dtype | None = None,
                 decode_attention: str = "auto", cuda_graphs: bool = True, attention_options: dict | None = None,
                 prefill_attention: str = "auto", fused_sampler: bool = True) -> None:
        """`attention_options`: options of the table decode path in use (`table_attention.FlexAttention`:
        `kernel_options`, `full_blocks`; `TritonAttention`: `splits`, `num_warps`, `num_stages`), for tuning on a
        GPU (`benchmarks/gpu_paged_check.py` compares them). `prefill_attention`: a `PrefillAttention` value
        (`prefill_attention.py`). `fused_sampler`: on CUDA, temperature sampling through one Triton kernel
        (`triton_sampler.py`) instead of `sampler.sample_tokens`."""
        if not eos_ids:
            raise ValueError("the torch engine needs at least one EOS token id")
        if max_batch < 1 or prefill_tokens < 1 or not kv_cache_gib > 0 or (block_size is not None and block_size < 1):
            raise ValueError(f"max_batch={max_batch}, prefill_tokens={prefill_tokens}, kv_cache_gib={kv_cache_gib} "
                             f"and block_size={block_size} must be positive")
        own = dtype is None or dtype == model.lm_head.weight.dtype
        self.model = model if own else copy.deepcopy(model).to(dtype)
        self.runner = ModelRunner(self.model)
        self.eos_ids = sorted(set(eos_ids))
        self.max_batch, self.kv_cache_gib, self.prefill_tokens = max_batch, kv_cache_gib, prefill_tokens
        self.block_size = block_size_for(self.runner.device.type, block_size)
        r = self.runner
        check_attention_paths(decode_attention, prefill_attention, r.device, r.dtype, r.head_dim)
        dev = r.device.type
        mode = DecodeAttention(decode_attention)
        self.decode_attention = DEFAULT_DECODE_ATTENTION.get(dev, DecodeAttention.SPLIT_K) \
            if mode is DecodeAttention.AUTO else mode
        if self.decode_attention is DecodeAttention.FLEX and dev != "cuda":
            warnings.warn("rollout.torch.decode_attention=flex off CUDA runs torch's eager flex_attention, which "
                          "computes scores over the whole KV pool every step (a reference, slow); split_k is the "
                          "fast path on CPU", stacklevel=2)
        r.prefill_attention = prefill_backend(prefill_attention, r.device, r.dtype, r.num_heads, r.num_kv, r.head_dim)
        self.fused_sampler = _fused_sampler() if fused_sampler and dev == "cuda" else None
        # CUDA graphs replay fixed-shape steps: the table backends only, on CUDA only
        self.graph_mode = GraphMode.CUDA if cuda_graphs and dev == "cuda" else GraphMode.OFF
        self.stats = EngineStats()
        self.cache: PagedKVCache | None = None
        self.blocks: BlockManager | None = None
        self.table: TableDecoder | None = None
        self.kept = KeptRows()
        self.attention_options = dict(attention_options or {})

    @property
    def dtype(self) -> torch.dtype:
        return self.runner.dtype

    def sync_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        load_weights(self.model, state_dict)

    def reserve(self, slots: int, capacity: int) -> None:
        """Set up the KV pool now and check that one sequence of `capacity` tokens fits the budget (a run calls this
        at start, so a budget error comes before any work). `slots` is not reserved: rows take blocks as they
        grow, and more rows than fit at once wait or are preempted."""
        del slots
        self._pool_for(capacity)
        # compile (and capture every batch bucket) now, not mid-rollout
        if self.graph_mode is GraphMode.CUDA or self.fused_sampler is not None:
            t0 = time.perf_counter()
            if n := self.warm_up(capacity):
                log.info(f"torch engine: {n} decode shapes (batch buckets up to {self.max_batch} rows) compiled and "
                         f"captured in {time.perf_counter() - t0:.0f} s, once per run")
        log.info(self.describe())  # after the warm-up: a path that fell back there shows as its replacement

    def describe(self) -> str:
        """One line for a run's start: the device and dtype, the decode, prefill and sampling paths, the KV pool."""
        dev = self.runner.device.type
        decode = self.decode_attention.value
        if self.table is not None:  # what the table decoder runs now (after any fallback)
            decode = self.table.backend.name + (" with CUDA graphs" if self.table.mode is GraphMode.CUDA else "")
        sampler = "fused Triton kernel" if self.fused_sampler is not None and not self.fused_sampler.failed \
            else "sample_tokens"
        pool = "not allocated yet" if self.cache is None else (
            f"{self.cache.nbytes / GIB:.2f} GiB in {self.cache.num_blocks:,} blocks of {self.block_size} tokens"
            + (", memory committed as blocks are written" if dev == "cpu" else ""))
        return (f"torch engine: {dev}, {str(self.dtype).removeprefix('torch.')} weights and KV; decode "
                f"{decode}; prefill {self.runner.prefill_attention.name}; sampling "
                f"{sampler}; KV pool {pool}")

    @torch.no_grad()
    def warm_up(self, capacity: int, progress: Callable[[int, int], None] | None = None) -> int:
        """Compile the fused sampler's kernel (CUDA), and run every batch bucket's fixed-shape decode step once
        (compiled kernels, captured graphs) for calls of up to `capacity` tokens per row (none on the split-K path).
        Returns the number of buckets run."""
        _, blocks = self._pool_for(capacity)
        if self.fused_sampler is not None:
            self.fused_sampler.warm_up(self.model.lm_head.out_features, self.dtype, self.runner.device)
        if self.table is None:
            return 0
        was_training = self.model.training
        self.model.eval()
        try:
            return self.table.warm_up(blocks.blocks_for(capacity), progress)
        finally:
            self.model.train(was_training)

    def _pool_for(self, tokens: int) -> tuple[PagedKVCache, BlockManager]:
        shape = self.runner.kv_shape()
        check_budget(shape, self.block_size, tokens, self.kv_cache_gib)
        dev = self.runner.device
        if self.cache is None or not self.cache.fits(shape, self.block_size, dev):
            self.cache = None  # free the old pool before allocating the new one
            gib = self.kv_cache_gib
            if dev.type == "cpu":  # a pool beyond the machine's RAM could never be filled
                gib = min(gib, physical_memory_bytes() / GIB)
            n = pool_blocks(shape, self.block_size, gib)
            self.cache = PagedKVCache(shape, self.block_size, n, dev)
            self.blocks = BlockManager(n, self.block_size, dev)
            self.table = None
            self.kept = KeptRows()  # kept rows lived in the old pool
            if self.decode_attention is not DecodeAttention.SPLIT_K:  # graphs hold the pool's addresses: per pool
                backend = table_backend(self.decode_attention.value, dev.type == "cuda", self.attention_options)
                self.table = TableDecoder(self.runner, self.cache, backend, self.max_batch, self.graph_mode.value)
        return self.cache, self.blocks

    def release_kept(self) -> None:
        """Give back the blocks of the rows the last `keep=True` call kept (a caller that will not continue them)."""
        self.kept.release_all()

    @torch.no_grad()
    def generate(self, prefixes: list[list[int]], max_new_tokens: int, params: SamplingParams,
                 seed: int | None = None, progress: Callable[[int], None] | None = None,
                 keep: bool = False, streams: list[int] | None = None) -> list[GenerationOutput]:
        """`progress(n)` is called when n rows finish (for a progress bar over a long call). `keep`: rows that stop at
        `max_new_tokens` keep their K/V for the next call, which continues a row without prefilling it when its
        prefix is this call's `prefix + tokens` and the weights have not changed (`kept_rows.py`). `streams`: one id
        per prefix keying its random stream (default: its position), so that a caller splitting one batch
        between engines (`rollout/engines/process_pool.py`) samples what one engine would."""
        check_prefixes(prefixes, max_new_tokens)
        if not prefixes:
            self.release_kept()
            return []
        cache, blocks = self._pool_for(max(len(p) for p in prefixes) + max_new_tokens)
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()).item())
        was_training = self.model.training
        self.model.eval()
        try:
            scheduler = self.scheduler_cls(self.runner, cache, blocks, self.stats, prefixes, max_new_tokens, params,
                                           seed, self.eos_ids, self.max_batch, self.prefill_tokens, progress,
                                           0 if self.table else RUN_MIN_BLOCKS.get(self.runner.device.type, 0),
                                           self.table, self.kept, keep, weights_version(self.model), streams,
                                           self.fused_sampler)
            return scheduler.run()
        finally:
            self.model.train(was_training)
