"""`DEVICE=cpu bash benchmarks/gpu_check.sh`: the GPU check's every part runs to its figures on CPU.

A GPU is lent rarely and for minutes, so a part that crashes there (a name left behind by a refactor, a changed
signature) costs a loan. This runs the script as the GPU machine does, with the tiny shapes of its dry run and
timeouts long enough for any machine, and reads the JSON that docs/scale.md quotes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TRITON_OFF_CUDA = "runs its kernel on CUDA"  # the triton paths' error on a CPU machine: expected here
NO_LIMIT = "3000"  # the script's part timeouts and budgets, in seconds: a slow machine is not a failure
# gpu_paged_check.py's parts up to issue 26's targets, in the order they run (`part_s`; the quick run's 8 rows
# stand for 256): the paper's mechanism before the side-by-side of decode paths
TARGETS_FIRST = ["bandwidth", "attention_paths", "segment_rollout M=1", "segment_rollout M=4", "decode_paths",
                 "decode 8", "slots_vs_paged"]


@pytest.mark.slow
def test_every_part_of_the_gpu_check_gives_its_figures(tmp_path):
    # SMOLLM2=0: the real-model recipe (minutes on CPU where `setup.sh --real` installed it) has its own test
    env = dict(os.environ, DEVICE="cpu", OUT=str(tmp_path), PYTHON=sys.executable, PAGED_TIMEOUT=NO_LIMIT,
               PAGED_BUDGET=NO_LIMIT, ENGINE_CHECK_TIMEOUT=NO_LIMIT, LEARNER_LONG_TIMEOUT=NO_LIMIT, SMOLLM2="0")
    proc = subprocess.run(["bash", "benchmarks/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=3600)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-3000:])
    assert "gpu_check: OK" in proc.stdout + proc.stderr
    r = json.loads((tmp_path / "gpu_check.json").read_text())
    assert r["environment"]["device"] == "cpu" and r["environment"]["torch"]

    p = r["paged_engine"]
    assert p["skipped"] == [] and p["quick"] is True and p["bandwidth"]["bytes_per_s"] > 0
    assert p["dynamo_limits"] == {"recompile": 512, "accumulated": 1024}  # room for ~20 engines' flex kernels
    assert [(s["rows"], s["setting"]) for s in p["sampler"]] == [(4, "rollout"), (4, "paper_eval")]
    assert all(s["ms"] > 0 for s in p["sampler"])
    assert [h["rows"] for h in p["host_step"]] == [4] and p["host_step"][0]["ms_per_step"] > 0
    norm = p["norm"]  # CPU, bfloat16: the engine runs the module itself (the fused op is CUDA's)
    assert norm["norms_per_step"] == 4 and norm["module_ms"] > 0 and norm["engine_ms"] > 0
    assert norm["max_diff_bf16_steps"] == 0.0
    pf = p["prefill"]  # CPU: the per-length SDPA only (test_prefill_attention.py runs the varlen branch)
    assert pf["auto"] == "sdpa" and "CUDA kernel" in pf["varlen_not_run"]
    assert [c["case"] for c in pf["cases"]] == ["prompts", "continued"] and all(c["sdpa_ms"] > 0 for c in pf["cases"])
    for path in p["decode_paths"]:  # every path measured, but the Triton kernel's (CUDA only)
        assert "ms_per_iteration" in path or TRITON_OFF_CUDA in path["error"], path
    assert any(d["path"] == "flex+graphs" and "ms_per_iteration" in d for d in p["decode_paths"])
    assert [(d["rows"], d["context"]) for d in p["decode"]] == [(8, 64), (8, 256), (4, 64), (4, 256)]
    assert list(p["part_s"]) == [*TARGETS_FIRST, "decode 4", "sampler / host_step", "norm", "prefill",
                                 "segment_rollout M=2", "segment_rollout M=8", "segment_rollout_64_rows M=1",
                                 "segment_rollout_64_rows M=4", "segment_rollout_64_rows M=8"]
    assert all(s >= 0 for s in p["part_s"].values())
    assert all(d["floor_ms"] > 0 and d["over_floor"] > 0 for d in p["decode"])
    for key, ms in (("segment_rollout", ("1", "2", "4", "8")), ("segment_rollout_64_rows", ("1", "4", "8"))):
        seg = p[key]
        for m in ms:
            assert seg[m]["samples"] >= 16 and seg[m]["fallbacks"] == [], seg[m]
            assert seg[m]["decode_floor_s"] > 0 and seg[m]["over_floor"] > 0, seg[m]
        assert {f"{s}_M{m}" for s in ("speedup", "floor_speedup") for m in ms[1:]} <= set(seg), key
        # every M on the first rollouts' path (auto: split_k on CPU), whatever the side-by-side chose after them
        assert {(seg[m]["decode_attention"], seg[m]["block_size"]) for m in ms} == {
            (p["segment_path"]["attention"], p["segment_path"]["block_size"])} == {("split_k", 32)}, key
    slots = p["slots_vs_paged"]
    assert "error" not in slots and slots["rows"] == 8 and 0 < slots["peak_kv_gib"] <= slots["pool_gib"]

    e = r["engine_check"]
    assert e["correctness"]["ok"] and e["correctness"]["max_abs_diff"] <= e["correctness"]["tolerance"] == 1e-5
    assert set(e["long_decode"]) == {"64", "256"} and all(v["tokens_per_s"] > 0 for v in e["long_decode"].values())
    assert {"1", "4"} <= set(e["segment_rollout"])

    report = (tmp_path / "gpu_report.md").read_text()  # its reading (gpu_report.py), also printed
    assert "### Issue 26's targets" in report and "### Issue 26's targets" in proc.stdout
    assert "Per iteration" in report and "| 8 | " in report  # the decode fit, and segment rollout's M = 8 row

    rows = r["learner_long"]["rows"]
    assert [row["length"] for row in rows] == [256, 512]
    assert all(row["update_s"] > 0 and row["grad_norm"] > 0 and row["predicted_total_gib"] > 0 for row in rows)
    packed = r["learner_long"]["packed"]  # CPU: SDPA per sample only (varlen_attn is CUDA's)
    assert packed["chosen"] == "sdpa" and list(packed["kernels"]) == ["sdpa"], packed
    assert packed["kernels"]["sdpa"]["grad_norm"] > 0 and packed["kernels"]["sdpa"]["micro_batches"] == 1
    assert "a packed row of 4 x 128 tokens" in report


@pytest.mark.slow
def test_the_paged_checks_targets_start_whatever_the_budget(tmp_path):
    """A loan's minutes go to issue 26's targets first: with no budget left from the start, the targets still run
    (only the timeout ends them), and every part after them is skipped and says so."""
    out = tmp_path / "paged.json"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_paged_check.py", "--device", "cpu", "--quick",
                           "--budget-s", "0", "--paths", "flex+graphs", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    p = json.loads(out.read_text())
    assert list(p["part_s"]) == TARGETS_FIRST
    assert [(d["rows"], d["context"]) for d in p["decode"]] == [(8, 64), (8, 256)]
    assert {"1", "4", "speedup_M4"} <= set(p["segment_rollout"]) and "error" not in p["slots_vs_paged"]
    assert p["skipped"] == ["decode 4 x 64: budget", "decode 4 x 256: budget",
                            "sampler / host_step / norm / prefill: budget", "segment_rollout M=2: budget",
                            "segment_rollout M=8: budget", "segment_rollout_64_rows M=1: budget",
                            "segment_rollout_64_rows M=4: budget", "segment_rollout_64_rows M=8: budget"]
