"""GPU check of one long sample through the learner (gpu_check.sh block 6): peak CUDA memory against `ulorl plan`.

The Qwen2.5-0.5B shape (24 layers, hidden 896, 14 heads, 2 KV heads, MLP 4864, vocabulary 151,936, tied
embeddings) with random weights from a transformers config (nothing downloaded), float32 master weights,
bfloat16 autocast, sdpa attention, gradient checkpointing, `train.logit_chunk` 4096. After a 256-token warm-up
update (AdamW state allocated), one `LocalLearner.update` on a single sample of L tokens (32k, then 64k when
the prediction fits the GPU): `torch.cuda.max_memory_allocated()` minus what was allocated before the update,
against `ulorl.plan.memory.learner_memory(...)["update_increment"]`, and the whole peak against its
`total_device`.

Then `packed`: one packed row of 16 samples of 2,048 tokens (a micro-batch of short answers), one update through
each attention of packed rows (`ulorl.learners.varlen`): SDPA per sample, and torch's `varlen_attn` once per layer
where the learner chose it (`packed_kernel`: CUDA, bf16, a probe that agrees with SDPA); seconds per update (the
second of two) and the gradient norms side by side.

    python benchmarks/gpu_learner_long_check.py --device cuda --out OUT/gpu_learner_long.json
    python benchmarks/gpu_learner_long_check.py --device cpu --out /tmp/x.json   # dry run: 2 layers, 512 tokens

The JSON (rewritten after each part, and printed on the last line) has one row per L, and `packed`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

SHAPE = dict(model_type="qwen2", num_hidden_layers=24, hidden_size=896, num_attention_heads=14, num_key_value_heads=2,
             head_dim=64, intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True)


def build(shape: dict, max_len: int, device: str):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ulorl.learners.checkpointing import enable_gradient_checkpointing

    cfg = Qwen2Config(**{k: v for k, v in shape.items() if k not in ("model_type", "head_dim")},
                      max_position_embeddings=max_len + 64, attn_implementation="sdpa", pad_token_id=0,
                      eos_token_id=1, bos_token_id=None)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(device)
    enable_gradient_checkpointing(model)
    return model


def sample(length: int, vocab: int, seed: int = 0, prompt: int = 16):
    from ulorl.trajectory import Trajectory

    g = torch.Generator().manual_seed(seed)
    n = length - prompt
    t = Trajectory(sample_id=f"g0/{seed}", group_id="g0", prompt_id=0,
                   prompt_tokens=torch.randint(2, vocab, (prompt,), generator=g).tolist(), ground_truth="0",
                   data_source="check", reward=1.0, stop_reason="eos")
    t.append_segment(torch.randint(2, vocab, (n,), generator=g).tolist(), (-torch.rand(n, generator=g)).tolist(), 0)
    return t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--lengths", default="32768,65536")
    p.add_argument("--out")
    args = p.parse_args()
    from ulorl.config import AlgoConfig, TrainConfig
    from ulorl.learners.local import LocalLearner
    from ulorl.plan.memory import GIB, LearnerSetup, ModelShape, learner_memory

    cuda = args.device.startswith("cuda")
    shape = dict(SHAPE) if cuda else {**SHAPE, "num_hidden_layers": 2, "vocab_size": 4096}  # dry run: small
    lengths = [int(x) for x in args.lengths.split(",")] if cuda else [256, 512]
    m = ModelShape.from_config(shape)
    model = build(shape, max(lengths), args.device)
    train = TrainConfig(lr=1e-6, micro_batch_tokens=max(lengths), logit_chunk=4096, device=args.device,
                        autocast="bfloat16" if cuda else "none")
    ln = LocalLearner(model, train, AlgoConfig(), temperature=1.0, pad_id=0)
    ln.update([sample(256, shape["vocab_size"], seed=1)], 1)  # AdamW state allocated
    gpu_bytes = torch.cuda.get_device_properties(0).total_memory if cuda else None
    rows = []
    result = {"check": "learner_long", "device": args.device, "model": shape, "params": m.params,
              "settings": {"dtype": "float32", "autocast": train.autocast, "gradient_checkpointing": True,
                           "logit_chunk": 4096, "attn": "sdpa"},
              "gpu": torch.cuda.get_device_name(0) if cuda else None, "rows": rows}
    save = lambda: args.out and Path(args.out).write_text(json.dumps(result, indent=1))  # noqa: E731
    for L in lengths:
        s = LearnerSetup(tokens=L, weight_bytes=4, autocast=cuda, checkpointing=True, logit_chunk=4096)
        pred = learner_memory(m, s)
        row = {"length": L, "predicted_increment_gib": pred["update_increment"] / GIB,
               "predicted_total_gib": pred["total_device"] / GIB}
        if gpu_bytes and pred["total_device"] > 0.9 * gpu_bytes:
            rows.append({**row, "skipped": "predicted not to fit"})
            continue
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        metrics = ln.update([sample(L, shape["vocab_size"])], 1)
        if cuda:
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            row.update(measured_increment_gib=(peak - before) / GIB, measured_total_gib=peak / GIB,
                       reserved_gib=torch.cuda.max_memory_reserved() / GIB)
            row["predicted_over_measured"] = row["predicted_increment_gib"] / row["measured_increment_gib"]
        row.update(update_s=time.perf_counter() - t0, grad_norm=metrics["actor/grad_norm"],
                   skipped_update=metrics["actor/skipped"])
        rows.append(row)
        save()
        print(json.dumps(row), file=sys.stderr, flush=True)
    try:  # recorded, never fatal: the long rows are this check's figures
        result["packed"] = packed_row(ln, shape["vocab_size"], *((16, 2048) if cuda else (4, 128)), cuda)
        print(json.dumps(result["packed"]), file=sys.stderr, flush=True)
    except Exception as e:
        result["packed"] = {"error": f"{type(e).__name__}: {str(e)[:400]}"}
    save()
    print(json.dumps(result))
    return 0


def packed_row(ln, vocab: int, samples: int, length: int, cuda: bool) -> dict:
    """One packed row of `samples` x `length` tokens through each kernel of packed rows the learner has here:
    seconds per update (the second of two, after the first's warm-up) and its gradient norm."""
    chosen = ln.packed_kernel
    batch = [sample(length, vocab, seed=100 + i) for i in range(samples)]
    for i, t in enumerate(batch):  # rewards that differ within the group: non-zero advantages, a real gradient
        t.reward = float(i % 2)
    out = {"samples": samples, "length": length, "chosen": chosen, "kernels": {}}
    for kernel in dict.fromkeys(["sdpa", chosen]):  # (chosen: "sdpa" or "varlen")
        ln.packed_kernel = kernel
        times, norms = [], []
        for _ in range(2):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            metrics = ln.update(batch, 1)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            norms.append(metrics["actor/grad_norm"])
        out["kernels"][kernel] = {"update_s": times[-1], "update_s_passes": times, "grad_norm": norms[-1],
                                  "micro_batches": metrics["actor/micro_batches"]}
    ln.packed_kernel = chosen
    k = out["kernels"]
    if "varlen" in k:
        out["speedup"] = k["sdpa"]["update_s"] / k["varlen"]["update_s"]
        out["grad_norm_rel_diff"] = abs(k["varlen"]["grad_norm"] / k["sdpa"]["grad_norm"] - 1)
    return out


if __name__ == "__main__":
    sys.exit(main())
