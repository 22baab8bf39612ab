"""`benchmarks/gpu_paged_check.py --device cpu --quick`: the GPU check's every part runs to its figures on CPU.

A GPU is lent rarely and for minutes, so a part that crashes there (a name left behind by a refactor, a changed
signature) costs a loan. This runs the script as the GPU machine does, with tiny shapes, and reads its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TRITON_OFF_CUDA = "runs its kernel on CUDA"  # the triton paths' error on a CPU machine: expected here


def test_every_part_of_the_paged_check_gives_its_figures(tmp_path):
    out = tmp_path / "paged.json"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_paged_check.py", "--device", "cpu", "--quick", "--out",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["skipped"] == [] and r["quick"] is True
    assert r["bandwidth"]["bytes_per_s"] > 0
    assert [(s["rows"], s["setting"]) for s in r["sampler"]] == [(4, "rollout"), (4, "paper_eval")]
    assert all(s["ms"] > 0 for s in r["sampler"])
    assert [h["rows"] for h in r["host_step"]] == [4] and r["host_step"][0]["ms_per_step"] > 0
    for path in r["decode_paths"]:  # every path measured, but the Triton kernel's (CUDA only)
        assert "ms_per_iteration" in path or TRITON_OFF_CUDA in path["error"], path
    assert any(p["path"] == "flex+graphs" and "ms_per_iteration" in p for p in r["decode_paths"])
    assert [(d["rows"], d["context"]) for d in r["decode"]] == [(4, 64), (4, 256), (8, 64), (8, 256)]
    assert all(d["floor_ms"] > 0 and d["over_floor"] > 0 for d in r["decode"])
    seg = r["segment_rollout"]
    for m in ("1", "2", "4", "8"):
        assert seg[m]["samples"] >= 16 and seg[m]["fallbacks"] == [], seg[m]
    assert {"speedup_M2", "speedup_M4", "speedup_M8"} <= set(seg)
    slots = r["slots_vs_paged"]
    assert "error" not in slots and slots["rows"] == 8 and 0 < slots["peak_kv_gib"] <= slots["pool_gib"]
