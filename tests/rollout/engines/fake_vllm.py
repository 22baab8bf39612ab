"""A stand-in `vllm` module with the small surface `ulorl.rollout.engines.vllm` uses (vLLM is GPU-only).

`install(monkeypatch)` puts it in `sys.modules["vllm"]`. Its `LLM` mimics vLLM's offline API shapes:
`generate(prompts, sampling_params, use_tqdm=False) -> [RequestOutput]` with `outputs[0].token_ids`,
`.logprobs` (one `{token_id: Logprob}` per position), `.finish_reason` / `.stop_reason`;
`collective_rpc(fn, args=...)` calling `fn(worker, *args)`; `reset_prefix_cache`, `sleep`, `wake_up`.
Keyword names are checked (unknown ones raise TypeError, as vLLM's own classes do).

Responses come from `responder(prompt_ids, sampling_params, index)` when set, else from a real HF model
loaded from the folder given to `LLM(model=...)`, sampled with processed log-probs
(`log_softmax(logits / T)`, equal to vLLM's "processed_logprobs" without top-p/top-k).
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import torch

LLM_KWARGS = {"model", "skip_tokenizer_init", "trust_remote_code", "tensor_parallel_size", "dtype", "seed",
              "gpu_memory_utilization", "enable_prefix_caching", "enable_sleep_mode", "enforce_eager",
              "logprobs_mode", "max_model_len", "max_num_seqs", "hf_overrides"}
SP_KWARGS = {"n", "temperature", "top_p", "top_k", "max_tokens", "logprobs", "stop_token_ids", "detokenize", "seed"}


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None
    stop_reason: int | str | None = None
    text: str = ""


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    num_cached_tokens: int = 0


class SamplingParams:
    def __init__(self, **kw):
        unknown = set(kw) - SP_KWARGS
        if unknown:
            raise TypeError(f"SamplingParams got unexpected keyword arguments {sorted(unknown)}")
        self.kw = kw
        self.__dict__.update(kw)
        self.seed = kw.get("seed")


class FakeModel:
    """The worker's model: an HF model whose `load_weights` takes (HF name, tensor) pairs like vLLM's."""

    def __init__(self, path: str, events: list):
        from transformers import AutoModelForCausalLM

        self.hf = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32).eval()
        self.events = events
        self.loaded: list[str] = []

    def load_weights(self, weights):
        own = self.hf.state_dict()
        names = []
        for name, tensor in weights:
            own[name].copy_(tensor)  # KeyError for a name the model does not have, as in vLLM
            names.append(name)
        self.loaded = names
        self.events.append(("load_weights", len(names)))
        return set(names)


@dataclass
class FakeWorker:
    model_runner: types.SimpleNamespace = field(default_factory=types.SimpleNamespace)


class FakeLLM:
    instances: list["FakeLLM"] = []
    responder = None  # (prompt_ids, SamplingParams, index) -> CompletionOutput; None: sample the HF model
    reject_logprobs_mode = False  # behave like vLLM < 0.10.2
    shuffle_outputs = False

    def __init__(self, **kw):
        unknown = set(kw) - LLM_KWARGS
        if self.reject_logprobs_mode and "logprobs_mode" in kw:
            unknown.add("logprobs_mode")
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        self.kwargs = kw
        self.events: list = []
        self.generate_calls: list[tuple[list, object]] = []
        self._model: FakeModel | None = None
        self.llm_engine = types.SimpleNamespace(model_config=types.SimpleNamespace(
            max_model_len=kw.get("max_model_len") or 4096))
        self._counter = 0
        FakeLLM.instances.append(self)

    @property
    def model(self) -> FakeModel:
        if self._model is None:
            self._model = FakeModel(self.kwargs["model"], self.events)
        return self._model

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.events.append(("generate", len(prompts)))
        self.generate_calls.append((prompts, sampling_params))
        outs = []
        for i, prompt in enumerate(prompts):
            sp = sampling_params[i] if isinstance(sampling_params, list) else sampling_params
            ids = list(prompt["prompt_token_ids"])
            responder = type(self).responder  # a plain function set on the class (not bound to self)
            comp = responder(ids, sp, i) if responder is not None else self._sample_hf(ids, sp, i)
            outs.append(RequestOutput(str(self._counter), ids, [comp], num_cached_tokens=len(ids) // 2))
            self._counter += 1
        return outs[::-1] if self.shuffle_outputs else outs

    def _sample_hf(self, ids, sp, index):
        gen = torch.Generator().manual_seed(sp.seed if sp.seed is not None else 1234 + index)
        toks, lps, finish, stop = [], [], "length", None
        with torch.no_grad():
            for _ in range(sp.max_tokens):
                logits = self.model.hf(torch.tensor([ids + toks])).logits[0, -1].float()
                if sp.temperature == 0:
                    logp = torch.log_softmax(logits, -1)
                    tok = int(logits.argmax())
                else:
                    logp = torch.log_softmax(logits / sp.temperature, -1)
                    tok = int(torch.multinomial(logp.exp(), 1, generator=gen))
                toks.append(tok)
                lps.append({tok: Logprob(float(logp[tok]), 1)})
                if tok in sp.stop_token_ids:
                    finish, stop = "stop", tok
                    break
        return CompletionOutput(0, toks, lps if sp.logprobs is not None else None, finish, stop)

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        worker = FakeWorker(types.SimpleNamespace(model=self.model))
        return [method(worker, *args, **(kwargs or {}))]

    def reset_prefix_cache(self, device=None):
        self.events.append(("reset_prefix_cache",))
        return True

    def sleep(self, level=1):
        self.events.append(("sleep", level))

    def wake_up(self, tags=None):
        self.events.append(("wake_up", tuple(tags) if tags else None))


def install(monkeypatch) -> types.ModuleType:
    """Make `import vllm` return the fake for this test; the engine's env defaults are restored afterwards."""
    mod = types.ModuleType("vllm")
    mod.__version__ = "0.0.fake"
    mod.LLM, mod.SamplingParams = FakeLLM, SamplingParams
    FakeLLM.instances = []
    monkeypatch.setattr(FakeLLM, "responder", None)
    monkeypatch.setattr(FakeLLM, "reject_logprobs_mode", False)
    monkeypatch.setattr(FakeLLM, "shuffle_outputs", False)
    monkeypatch.setitem(sys.modules, "vllm", mod)
    for var in ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_ALLOW_INSECURE_SERIALIZATION"):
        monkeypatch.setenv(var, "unset-by-test")  # records the original value, restored after the test
        monkeypatch.delenv(var)
    return mod
