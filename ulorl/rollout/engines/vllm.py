"""The vLLM engine (GPU): the `Engine` protocol over an offline `vllm.LLM`.

vLLM loads the policy from its model folder (the start policy of the run, or the checkpoint resumed
from) and afterwards receives the learner's weights in memory after every update (`sync_weights`),
without a restart. Prefixes go in as token ids (`{"prompt_token_ids": ...}`), so continuing an
unfinished sample is just generating from prompt + response so far; automatic prefix caching lets
the G samples of a prompt, and a continued sample within one policy version, reuse their KV blocks.
vLLM is an optional dependency (`pip install 'ulorl[vllm]'`, >= 0.19.1) imported only when the engine
is built.

What differs from the HF engine, and why:
- **Behaviour log-probs.** We ask vLLM for `logprobs_mode="processed_logprobs"`: log-probs after
  temperature *and* top-k/top-p. With top_p = 1 and top_k = -1 (the paper's training settings) that is
  exactly our definition, `log_softmax(logits / temperature)` of the sampled token. With filtering on,
  vLLM reports the log-prob under the renormalised, filtered distribution, which exceeds ours by
  `-log(kept probability mass)`; no vLLM mode returns the unfiltered tempered value (`raw_logprobs` is
  before temperature). POIS and TOIS recompute old log-probs in the learner and never read these;
  SAIS does, so use SAIS with vLLM only without top-p/top-k during training. Greedy requests
  (temperature 0) get log-probs of the untempered logits.
- **EOS.** vLLM stops a request on the ids in `stop_token_ids` (ours: tokenizer + generation-config
  EOS) and keeps the stop token in `token_ids`, as the HF engine does. `finish_reason == "stop"`
  with an EOS id as the last token is EOS; `"length"` is the segment (or context) cap.
- **Seeds.** With a call seed, request i gets `SamplingParams(seed=...)` derived from (seed, i), so
  the G copies of one prompt differ and a rerun repeats (up to vLLM's batch-dependent kernels; vLLM
  also samples seeded rows one at a time, so `seeded=False` is faster for very large batches).
- **Weight sync.** `load_weights` runs on every worker through `LLM.collective_rpc` (the model is
  reached as the worker's `model_runner.model`), then `reset_prefix_cache()`: the cache holds KV
  blocks computed by the old weights. With tensor_parallel_size = 1 the engine core runs in this
  process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, as TRL's colocate mode and verl do) and the update is
  a device-to-device copy; with tensor parallelism the workers are other processes and the weights
  are sent through vLLM's RPC as CPU tensors (simple, slow for big models).
- **Sleep mode** (`enable_sleep_mode`): after each `generate` the engine sleeps at level 1 (weights
  backed up to CPU memory, KV cache freed) so a learner on the same GPU gets the memory for its
  update; `sync_weights` wakes only the weights, the next `generate` the KV cache. Level 1 (not 2)
  keeps the weights valid when an update is skipped and no sync follows.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import torch

from ulorl.rollout.engines.base import EngineStats, GenerationOutput, SamplingParams

INSTALL_HINT = "pip install 'ulorl[vllm]'"
# LLM(logprobs_mode="processed_logprobs") came in 0.10.2; 0.19.1 is the first vLLM that allows transformers 5
# (0.11.1-0.19.0 require transformers < 5, which ulorl refuses: ulorl/models/versions.py)
MIN_VERSION = "0.19.1"
_SEED_MOD = 2**63 - 1
_NAME_NOISE = ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")  # wrappers around HF names


def import_vllm():
    """The `vllm` module, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("vllm")
    except ImportError as e:
        raise ImportError(f"rollout.engine=vllm needs vLLM >= {MIN_VERSION}, which is not installed: "
                          f"{INSTALL_HINT} (GPU machines; vLLM brings its own CUDA build of torch)") from e


def request_seed(seed: int, i: int) -> int:
    """Seed of request `i` in a call with seed `seed` (distinct per request, so a group's samples differ)."""
    return (seed * 1_000_003 + i) % _SEED_MOD


def vllm_param_name(name: str) -> str:
    """A learner state-dict key as vLLM's `load_weights` expects it (the HF checkpoint name)."""
    for noise in _NAME_NOISE:
        name = name.replace(noise, "")
    return name


def yarn_overrides(model_path: str | os.PathLike, factor: float, original_max_len: int | None,
                   trust_remote_code: bool = False) -> tuple[dict, int]:
    """(`hf_overrides`, max_model_len) giving vLLM the same YaRN rope scaling as `ulorl.models.load_model`.

    Both keys are set: vLLM built on transformers 4.x reads `rope_scaling`, newer vLLM reads
    `rope_parameters` (with `rope_theta` inside); transformers 5 treats `rope_scaling` as an alias.
    """
    from transformers import AutoConfig

    from ulorl.models.loading import yarn_rope_parameters

    config = AutoConfig.from_pretrained(model_path, local_files_only=True, trust_remote_code=trust_remote_code)
    original = int(original_max_len or config.max_position_embeddings)
    params = yarn_rope_parameters(config, factor, original)
    theta = getattr(config, "rope_theta", None)
    if "rope_theta" not in params and theta is not None:
        params["rope_theta"] = theta
    return {"rope_scaling": dict(params), "rope_parameters": dict(params)}, int(original * factor)


def _load_weights_on_worker(worker, weights: list[tuple[str, torch.Tensor]]) -> int:
    """Runs inside each vLLM worker (via `collective_rpc`): load HF-named tensors into its model shard."""
    get_model = getattr(worker, "get_model", None)  # unwraps CUDA-graph wrappers where vLLM has it
    model = get_model() if callable(get_model) else worker.model_runner.model
    model.load_weights(weights=weights)
    return len(weights)


class VLLMEngine:
    """Engine over `vllm.LLM` (see the module docstring for the mapping and its limits)."""

    def __init__(self, model_path: str | os.PathLike, eos_ids: list[int], *, gpu_memory_utilization: float = 0.5,
                 tensor_parallel_size: int = 1, max_model_len: int | None = None, dtype: str = "auto",
                 enable_sleep_mode: bool = False, enable_prefix_caching: bool = True, enforce_eager: bool = False,
                 max_num_seqs: int | None = None, seeded: bool = True, seed: int = 0,
                 hf_overrides: dict | None = None, trust_remote_code: bool = False) -> None:
        if not eos_ids:
            raise ValueError("VLLMEngine needs at least one EOS token id")
        vllm = import_vllm()
        self.model_path = str(model_path)
        self.eos_ids = sorted(set(int(i) for i in eos_ids))
        self._eos = set(self.eos_ids)
        self.tensor_parallel_size = tensor_parallel_size
        self.enable_sleep_mode = enable_sleep_mode
        self.seeded = seeded
        self.stats = EngineStats(extra={"generate_calls": 0, "weight_syncs": 0, "cached_prompt_tokens": 0})
        self._asleep: set[str] = set()
        if tensor_parallel_size == 1:  # engine core in this process: weight updates are a device copy
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        else:  # workers in other processes: collective_rpc must ship a function and the weights
            os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        kwargs = dict(model=self.model_path, skip_tokenizer_init=True, trust_remote_code=trust_remote_code,
                      tensor_parallel_size=tensor_parallel_size, dtype=dtype, seed=seed,
                      gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=enable_prefix_caching,
                      enable_sleep_mode=enable_sleep_mode, enforce_eager=enforce_eager,
                      logprobs_mode="processed_logprobs")
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if max_num_seqs is not None:
            kwargs["max_num_seqs"] = max_num_seqs
        if hf_overrides:
            kwargs["hf_overrides"] = hf_overrides
        try:
            self.llm = vllm.LLM(**kwargs)
        except TypeError as e:
            if "logprobs_mode" in str(e):
                raise ImportError(f"vLLM {getattr(vllm, '__version__', '?')} is too old: ulorl needs >= {MIN_VERSION} "
                                  f"(LLM(logprobs_mode=...)); {INSTALL_HINT} --upgrade") from e
            raise
        self._vllm = vllm

    # -- protocol ------------------------------------------------------------------------------
    def generate(self, prefixes: list[list[int]], max_new_tokens: int, params: SamplingParams,
                 seed: int | None = None) -> list[GenerationOutput]:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if any(len(p) == 0 for p in prefixes):
            raise ValueError("every prefix needs at least one token")
        if not prefixes:
            return []
        self._check_context(prefixes, max_new_tokens)
        sampling = self._sampling_params(params, max_new_tokens, seed, len(prefixes))
        prompts = [{"prompt_token_ids": [int(t) for t in p]} for p in prefixes]
        self._wake(("weights", "kv_cache"))
        try:
            outs = self.llm.generate(prompts, sampling, use_tqdm=False)
        finally:
            if self.enable_sleep_mode:
                self._sleep()
        if len(outs) != len(prefixes):
            raise RuntimeError(f"vLLM returned {len(outs)} outputs for {len(prefixes)} prefixes")
        results = [self._convert(out, prefix) for out, prefix in zip(outs, prefixes)]
        self._count(prefixes, outs, results)
        return results

    def sync_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Load the learner's weights into every vLLM worker, then drop the prefix cache (old-weight KV)."""
        self._wake(("weights",))
        on_cpu = self.tensor_parallel_size > 1  # shipped to other processes
        weights = [(vllm_param_name(k), v.detach().cpu() if on_cpu else v.detach()) for k, v in state_dict.items()]
        self.llm.collective_rpc(_load_weights_on_worker, args=(weights,))
        if self.llm.reset_prefix_cache() is False:
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight update (requests still "
                               "running?); its cached KV blocks would come from the old weights")
        self.stats.extra["weight_syncs"] += 1

    # -- helpers -------------------------------------------------------------------------------
    def _sampling_params(self, params: SamplingParams, max_new_tokens: int, seed: int | None, n: int):
        base = dict(n=1, temperature=0.0 if params.greedy else params.temperature, top_p=params.top_p,
                    top_k=params.top_k if params.top_k > 0 else -1, max_tokens=max_new_tokens, logprobs=0,
                    stop_token_ids=list(self.eos_ids), detokenize=False)
        if seed is None or not self.seeded:
            return self._vllm.SamplingParams(**base)
        return [self._vllm.SamplingParams(**base, seed=request_seed(seed, i)) for i in range(n)]

    def max_model_len(self) -> int | None:
        """The context vLLM serves (prompt + response), when the engine exposes it."""
        cfg = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        value = getattr(cfg, "max_model_len", None)
        return int(value) if isinstance(value, int) else None

    def _check_context(self, prefixes: list[list[int]], max_new_tokens: int) -> None:
        limit = self.max_model_len()
        longest = max(len(p) for p in prefixes)
        if limit is not None and longest + max_new_tokens > limit:
            raise ValueError(f"a prefix of {longest} tokens + {max_new_tokens} new tokens exceeds the vLLM context "
                             f"(max_model_len={limit}); raise rollout.vllm.max_model_len (with YaRN via "
                             "model.rope_scaling_factor for long outputs) or lower data.max_prompt_len / "
                             "rollout.max_response_len")

    def _convert(self, out, prefix: list[int]) -> GenerationOutput:
        prompt_ids = getattr(out, "prompt_token_ids", None)
        if prompt_ids is not None and (len(prompt_ids) != len(prefix) or prompt_ids[-1] != prefix[-1]):
            raise RuntimeError("vLLM returned outputs out of order (prompt tokens do not match the prefix)")
        comp = out.outputs[0]
        tokens = [int(t) for t in comp.token_ids]
        logprobs = _sampled_logprobs(comp.logprobs, tokens)
        eos = bool(tokens) and tokens[-1] in self._eos
        if comp.finish_reason not in ("stop", "length"):
            raise RuntimeError(f"vLLM request ended with finish_reason={comp.finish_reason!r} "
                               f"(stop_reason={getattr(comp, 'stop_reason', None)!r}); expected 'stop' or 'length'")
        if comp.finish_reason == "stop" and not eos:
            raise RuntimeError(f"vLLM stopped a request without an EOS token (stop_reason="
                               f"{getattr(comp, 'stop_reason', None)!r}); only EOS ids should stop generation")
        return GenerationOutput(tokens=tokens, logprobs=logprobs, eos=eos, prefill_tokens=len(prefix))

    def _count(self, prefixes, outs, results: list[GenerationOutput]) -> None:
        lengths = [len(r.tokens) for r in results]
        iterations = max(lengths, default=0)  # continuous batching: about the longest request's decode steps
        self.stats.decode_iterations += iterations
        self.stats.decode_slots += len(results) * iterations
        self.stats.useful_tokens += sum(lengths)
        self.stats.prefill_tokens += sum(len(p) for p in prefixes)
        self.stats.prefill_padded_tokens += sum(len(p) for p in prefixes)  # vLLM packs prefills: no padding
        self.stats.extra["generate_calls"] += 1
        self.stats.extra["cached_prompt_tokens"] += sum(int(getattr(o, "num_cached_tokens", 0) or 0) for o in outs)

    def _sleep(self) -> None:
        self.llm.sleep(level=1)  # level 1: weights kept (in CPU memory), KV cache freed
        self._asleep = {"weights", "kv_cache"}

    def _wake(self, tags: tuple[str, ...]) -> None:
        todo = [t for t in tags if t in self._asleep]
        if todo:
            if torch.cuda.is_available():  # the learner's cached-but-free blocks would leave vLLM short (TRL does too)
                torch.cuda.empty_cache()
            self.llm.wake_up(tags=todo)
            self._asleep.difference_update(todo)


def _sampled_logprobs(logprobs, tokens: list[int]) -> list[float]:
    """The log-prob of each sampled token from vLLM's per-position {token id: Logprob} maps."""
    if logprobs is None:
        raise RuntimeError("vLLM returned no log-probs although SamplingParams(logprobs=0) asked for them")
    if len(logprobs) != len(tokens):
        raise RuntimeError(f"vLLM returned {len(logprobs)} log-prob entries for {len(tokens)} tokens")
    out = []
    for pos, (tok, entry) in enumerate(zip(tokens, logprobs)):
        lp = entry.get(tok) if entry is not None else None
        if lp is None:
            raise RuntimeError(f"vLLM log-probs at position {pos} lack the sampled token {tok}")
        out.append(float(lp.logprob))
    return out


def build_vllm_engine(eos_ids: list[int], model_path: str | os.PathLike | None = None, options=None,
                      model_cfg=None, seed: int = 0) -> VLLMEngine:
    """The engine from run settings: `options` = `rollout.vllm`, `model_cfg` = `model` (dtype, YaRN, remote code)."""
    import_vllm()  # fail with the install hint before touching the model folder
    if model_path is None:
        raise ValueError("rollout.engine=vllm needs the policy's model folder (vLLM loads weights from disk)")
    from ulorl.models.loading import resolve_model_path

    folder = Path(resolve_model_path(model_path))
    kw = {} if options is None else {k: getattr(options, k) for k in (
        "gpu_memory_utilization", "tensor_parallel_size", "max_model_len", "dtype", "enable_sleep_mode",
        "enable_prefix_caching", "enforce_eager", "max_num_seqs", "seeded")}
    trust = bool(getattr(model_cfg, "trust_remote_code", False))
    factor = getattr(model_cfg, "rope_scaling_factor", None)
    if factor is not None:
        overrides, yarn_len = yarn_overrides(folder, factor, getattr(model_cfg, "rope_original_max_len", None), trust)
        kw["hf_overrides"] = overrides
        if kw.get("max_model_len") is None:
            kw["max_model_len"] = yarn_len
    return VLLMEngine(folder, eos_ids, seed=seed, trust_remote_code=trust, **kw)
