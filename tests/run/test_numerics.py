"""`train.cpu_numerics`: what `portable` pins, in a fresh process, against the same pins from the environment."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from ulorl.config import ConfigError, load_run_config
from ulorl.run.numerics import CPU_NUMERICS, apply_cpu_numerics

x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="portable pins x86-64 kernels")

# a few AdamW steps of the tiny model in a fresh interpreter: the hash of its weights and torch's kernel family.
# argv: a mode applied in the process before any tensor operation ("": the environment as given), the model
_FINGERPRINT = r"""
import hashlib, json, sys
mode, model_dir = sys.argv[1], sys.argv[2]
if mode:
    from ulorl.run.numerics import apply_cpu_numerics
    apply_cpu_numerics(mode)
import torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(1)
model = AutoModelForCausalLM.from_pretrained(model_dir)
ids = torch.randint(0, model.config.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(3):
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()
h = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print(json.dumps({"hash": h, "capability": torch.backends.cpu.get_cpu_capability()}))
"""


def _env_without_pins() -> dict:
    """This process's environment without the variables `portable` sets (a child then starts unpinned)."""
    return {k: v for k, v in os.environ.items() if k not in CPU_NUMERICS["portable"]}


def _unpin(monkeypatch) -> None:
    """Remove `portable`'s variables for this test only. `delenv` alone records nothing for a variable that is not
    there, so one the test then sets would outlive it, and every engine or learner child spawned by a later test in
    this process would compute on MKL's other branch than its parent."""
    for key in CPU_NUMERICS["portable"]:
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)


def _fingerprint(model_dir, mode: str = "", env: dict | None = None) -> dict:
    base = _env_without_pins()
    out = subprocess.run([sys.executable, "-c", _FINGERPRINT, mode, str(model_dir)], env={**base, **(env or {})},
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@x86
def test_portable_in_process_equals_the_pins_set_in_the_environment(tiny_model_dir):
    """Applied by the run before any tensor operation, `portable` computes the same bits as a process started
    with its variables, and torch runs its AVX2 kernels."""
    applied = _fingerprint(tiny_model_dir, "portable")
    from_env = _fingerprint(tiny_model_dir, env=CPU_NUMERICS["portable"])
    assert applied["capability"] == from_env["capability"] == "AVX2"
    assert applied["hash"] == from_env["hash"]


def test_native_changes_nothing(monkeypatch):
    _unpin(monkeypatch)
    apply_cpu_numerics("native")
    assert not any(key in os.environ for key in CPU_NUMERICS["portable"])


@x86
def test_portable_refuses_a_different_value_in_the_environment(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    with pytest.raises(ConfigError, match="MKL_CBWR=AVX2"):
        apply_cpu_numerics("portable")
    monkeypatch.setenv("MKL_CBWR", "AVX2,STRICT")
    with pytest.raises(ConfigError, match="MKL_CBWR=AVX2,STRICT"):
        apply_cpu_numerics("portable")


@x86
def test_portable_keeps_the_same_branch_with_options(monkeypatch):
    """MKL's own syntax for its branch (with options, or BRANCH=) names the same pin: kept as the user set it."""
    import torch

    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # this process chose long ago
    _unpin(monkeypatch)
    for value in ("COMPATIBLE,STRICT", "BRANCH=COMPATIBLE", "compatible"):
        monkeypatch.setenv("MKL_CBWR", value)
        os.environ.pop("ATEN_CPU_CAPABILITY", None)  # _unpin's undo removes it after the test
        apply_cpu_numerics("portable")
        assert os.environ["MKL_CBWR"] == value and os.environ["ATEN_CPU_CAPABILITY"] == "avx2"


@x86
def test_portable_after_torch_chose_its_kernels_is_an_error_unless_it_chose_avx2():
    """torch reads ATEN_CPU_CAPABILITY once: applied after a tensor operation, `portable` cannot pin it. On a CPU
    whose best kernels are AVX2 anyway there is nothing to pin and no error."""
    code = ("import torch, json\n"
            "native = torch.backends.cpu.get_cpu_capability()\n"
            "torch.ones(8).exp()\n"
            "from ulorl.run.numerics import apply_cpu_numerics, NumericsError\n"
            "import os\n"
            "try:\n    apply_cpu_numerics('portable'); err = ''\n"
            "except NumericsError as e:\n    err = str(e)\n"
            "pins = [os.environ.get(k) for k in ('ATEN_CPU_CAPABILITY', 'MKL_CBWR')]\n"
            "print(json.dumps({'native': native, 'err': err, 'pins': pins}))\n")
    base = _env_without_pins()
    out = json.loads(subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True,
                                    timeout=120, check=True).stdout.strip().splitlines()[-1])
    if out["native"] == "AVX2":
        assert out["err"] == "" and out["pins"] == ["avx2", "COMPATIBLE"]
    else:
        assert f"already dispatches to {out['native']} kernels" in out["err"]
        assert "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE" in out["err"]
        assert out["pins"] == [None, None]  # the error leaves the environment as it was


def test_the_config_names_the_modes():
    for mode in CPU_NUMERICS:  # every mode the runner applies, the config accepts
        assert load_run_config(None, [f"train.cpu_numerics={mode}"]).train.cpu_numerics == mode
    with pytest.raises(ConfigError, match="train.cpu_numerics"):
        load_run_config(None, ["train.cpu_numerics=fast"])


@x86
def test_ulorl_sft_pins_before_its_work_or_says_it_came_too_late(tmp_path, capsys, monkeypatch):
    """The CLI applies `train.cpu_numerics` before the SFT. In this test process torch chose its kernels long ago:
    where that choice was not AVX2 the command stops with a one-line error naming the fix, before any work."""
    import torch

    from ulorl.cli import main
    from ulorl.run import sft_report

    _unpin(monkeypatch)
    ran = []
    report = {"model": "m", "sft": {"steps": 0}, "eval": None}
    monkeypatch.setattr(sft_report, "sft_and_report", lambda cfg, run_dir: ran.append(cfg) or report)
    rc = main(["sft", "-o", str(tmp_path / "run"), "train.cpu_numerics=portable"])
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        assert (rc, len(ran)) == (0, 1) and os.environ["MKL_CBWR"] == "COMPATIBLE"
    else:
        assert "MKL_CBWR" not in os.environ  # the error leaves the environment as it was
        err = capsys.readouterr().err
        assert (rc, ran) == (2, [])
        assert "train.cpu_numerics=portable: torch already dispatches" in err and len(err.strip().splitlines()) == 1


_SPAWNED = r"""
import json, multiprocessing as mp, os
from ulorl.run.numerics import apply_cpu_numerics


def child(q):
    import torch
    q.put([torch.backends.cpu.get_cpu_capability(), os.environ.get("MKL_CBWR")])


if __name__ == "__main__":
    apply_cpu_numerics("portable")
    ctx = mp.get_context("spawn")  # as the engine and learner processes start
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    print(json.dumps(q.get(timeout=120)))
    p.join()
"""


@x86
def test_spawned_children_inherit_the_pins(tmp_path):
    """The engine processes (`rollout.torch.procs`) and the overlap learner start by spawn after the run pinned its
    numerics: they must compute with the same kernels."""
    script = tmp_path / "spawned.py"
    script.write_text(_SPAWNED)
    base = _env_without_pins()
    out = subprocess.run([sys.executable, str(script)], env={**base, "PYTHONPATH": os.pathsep.join(sys.path)},
                         capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["AVX2", "COMPATIBLE"]


def test_ulorl_eval_takes_the_mode_from_the_flag_else_the_preset(tmp_path):
    import argparse

    from ulorl.evaluation.cli import add_eval_arguments, cpu_numerics

    def args(*argv):
        return add_eval_arguments(argparse.ArgumentParser()).parse_args(list(argv))

    preset = tmp_path / "run.yaml"
    preset.write_text("train:\n  cpu_numerics: portable\n")
    assert cpu_numerics(args()) == "native"
    assert cpu_numerics(args("--config", str(preset))) == "portable"
    assert cpu_numerics(args("--config", str(preset), "--cpu-numerics", "native")) == "native"
    preset.write_text("train:\n  cpu_numerics: fast\n")
    with pytest.raises(ConfigError, match="train.cpu_numerics='fast'"):
        cpu_numerics(args("--config", str(preset)))


@x86
def test_ulorl_eval_pins_before_it_samples_and_reports_it(tiny_model_dir, tmp_path):
    """`ulorl eval --cpu-numerics portable`, started without the pins, samples with torch's AVX2 kernels and MKL's
    COMPATIBLE branch, and results.json says so."""
    cmd = [sys.executable, "-m", "ulorl.cli", "eval", "--model", str(tiny_model_dir), "--data", "builtin:chain",
           "--k", "1", "--pass-k", "1", "--num-problems", "2", "--max-new-tokens", "8", "--cpu-numerics", "portable",
           "-o", str(tmp_path / "eval")]
    subprocess.run(cmd, env=_env_without_pins(), capture_output=True, text=True, timeout=300, check=True)
    report = json.loads((tmp_path / "eval" / "results.json").read_text())["cpu_numerics"]
    assert (report["mode"], report["torch_cpu_capability"], report["mkl_cbwr"]) == ("portable", "AVX2", "COMPATIBLE")


def test_cpuinfo_reads_the_first_processor_and_the_model_id_names_family_and_model(tmp_path, monkeypatch):
    """Two AMD EPYC generations share the model name; the family and model numbers tell them apart."""
    from ulorl.run import numerics

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\nflags\t\t: a:b\n\n"
                    "processor\t: 1\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Other\n")
    fields = numerics._cpuinfo(str(info))
    assert (fields["model name"], fields["cpu family"], fields["model"], fields["flags"]) == ("AMD EPYC", "25", "17",
                                                                                             "a:b")
    monkeypatch.setattr(numerics, "_cpuinfo", lambda: fields)
    assert numerics.cpu_name() == "AMD EPYC"
    assert numerics.cpu_model_id() == "AMD EPYC (family 25, model 17)"
    report = numerics.numerics_report("native")
    assert (report["cpu"], report["cpu_model"]) == ("AMD EPYC", "AMD EPYC (family 25, model 17)")
    monkeypatch.setattr(numerics, "_cpuinfo", lambda: {})  # no /proc/cpuinfo: the name alone
    assert numerics.cpu_model_id() == numerics.cpu_name()


def test_the_summary_names_what_decided_the_floats():
    """The console summary's numerics line, by hand, for a native run and a pinned one, and `format_summary` prints
    it (a user compares the result with the README's rows of the same kernel family)."""
    from ulorl.run.numerics import numerics_line
    from ulorl.run.report import format_summary

    native = {"mode": "native", "torch_cpu_capability": "AVX512", "mkl_cbwr": "", "threads": 2, "cpu": "AMD EPYC",
              "cpu_model": "AMD EPYC (family 26, model 2)"}
    assert numerics_line(native) == ("floats: train.cpu_numerics=native, torch's AVX512 kernels, MKL's automatic "
                                     "branch, 2 threads, AMD EPYC (family 26, model 2)")
    pinned = {**native, "mode": "portable", "torch_cpu_capability": "AVX2", "mkl_cbwr": "COMPATIBLE", "threads": 1,
              "cpu_model": ""}
    assert numerics_line(pinned) == ("floats: train.cpu_numerics=portable, torch's AVX2 kernels, MKL_CBWR=COMPATIBLE, "
                                     "1 thread, AMD EPYC")
    summary = {"steps": 1, "trained_samples": 8, "dropped_groups": 0, "entropy": [0.5], "segments_hist": {"1": 8},
               "run_dir": "runs/x", "cpu_numerics": native}
    lines = format_summary(summary).splitlines()
    assert lines[-2] == numerics_line(native) and lines[-1].startswith("run folder: runs/x")
    without = format_summary({**summary, "cpu_numerics": None}).splitlines()
    assert not any(line.startswith("floats:") for line in without)
