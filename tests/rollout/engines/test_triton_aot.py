"""Our Triton kernels (decode attention, the fused sampler) compiled for sm_90 (H100 / H200) here, without a GPU
(`triton_aot.py`).

The kernel's other tests run it under Triton's interpreter (`tests/conftest.py` turns it on for this whole
process), which runs programs the real compiler would reject; the compile itself runs in a child process with the
interpreter off, through Triton's CUDA backend and the ptxas it ships.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ulorl.rollout.engines.torch.triton_aot import aot_unavailable

from tests.rollout.engines.benchmark_modules import benchmark_module

ROOT = Path(__file__).resolve().parents[3]
# Triton's CUDA backend and its compile options (3.6 and later; the set-up installs 3.6.0, torch 2.14's brings 3.8)
WHY_NOT = aot_unavailable()
needs_triton = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))


def _compiled_mode_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton_cache")  # a real compile, not a cached cubin
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "benchmarks"), env.get("PYTHONPATH", "")])
    return env


@needs_triton
def test_every_gpu_check_launch_compiles_for_sm90_and_fits(tmp_path):
    """Every launch `benchmarks/gpu_paged_check.py` makes through the triton path (each of its settings, both model
    shapes, 256 and 64 rows), gpu_engine_check's float32 one and the fused sampler's compile for sm_90; the shared
    memory each asks fits an H200's 227 KiB per block, and none spills registers."""
    out = tmp_path / "aot.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "triton_aot_check.py"), "--out", str(out)],
                         cwd=ROOT, env=_compiled_mode_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    check = benchmark_module("gpu_paged_check")
    wanted = {(name, shape, rows) for name, (attention, *_) in check.VARIANT_NAMES.items() if attention == "triton"
              for shape in check.SHAPES for rows in (256, 64)}
    got = {(b["path"], b["shape"], b["rows"]) for b in result["builds"]}
    assert wanted <= got and len(wanted) >= 8
    assert any(b["dtype"] == "float32" for b in result["builds"])
    sampler = [b for b in result["builds"] if b["path"] == "fused sampler"]
    assert sorted(b["dtype"] for b in sampler) == ["bfloat16", "float32"]
    assert all([k["kernel"] for k in b["kernels"]] == ["_sample_kernel"] for b in sampler)
    for b in result["builds"]:
        assert b in sampler or [k["kernel"] for k in b["kernels"]] == ["_slice_kernel", "_merge_kernel"]
        for k in b["kernels"]:
            assert k["arch"] == 90 and k["shared_limit"] == 232448
            assert k["fits"] and k["shared_bytes"] <= 232448, (b["path"], b["shape"], k)
            assert 0 < k["registers"] <= 255 and k["local_bytes"] == 0, (b["path"], b["shape"], k)
    assert result["all_fit"] and result["spilling"] == []
    # 128-token KV tiles stage twice the K/V of 64-token ones: more shared memory for the same shape
    shared = {(b["path"], b["shape"], b["rows"]): b["kernels"][0]["shared_bytes"] for b in result["builds"]}
    assert shared[("triton+graphs@128", "qwen3-1.7b", 256)] > shared[("triton+graphs", "qwen3-1.7b", 256)]


@needs_triton
def test_a_tile_too_large_for_the_device_does_not_fit(tmp_path):
    """float32 K and V tiles of 128 tokens x 128 dims are 64 KiB each; pipelined (2 stages) they are staged in
    shared memory together, past an RTX 4090's (sm_89) 99 KiB per block but within an H200's 227 KiB."""
    code = ("import json, torch\n"
            "from ulorl.rollout.engines.torch.triton_aot import compile_decode\n"
            "kw = dict(kv_heads=2, group=2, head_dim=128, block_size=128, rows=4, width=8, num_stages=2)\n"
            "out = {a: compile_decode(torch.float32, arch=a, **kw)[0].as_dict() for a in (89, 90)}\n"
            "print(json.dumps(out))\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_compiled_mode_env(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["89"]["shared_bytes"] >= 2 * 128 * 128 * 4 > 101376 == out["89"]["shared_limit"]
    assert not out["89"]["fits"]
    assert out["90"]["fits"] and out["90"]["shared_bytes"] <= 232448


@needs_triton
def test_compiling_under_the_interpreter_is_a_clear_error():
    """This process runs Triton's interpreter (conftest), whose kernels cannot be compiled."""
    from ulorl.rollout.engines.torch.triton_aot import compile_decode

    with pytest.raises(RuntimeError, match="interpreter is on .*unset TRITON_INTERPRET"):
        compile_decode(torch.bfloat16, kv_heads=2, group=7, head_dim=64, rows=4, width=4)
