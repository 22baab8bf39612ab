"""The `distributed:` config section, Ray's install hint, and the RayEngine's pure helpers (no Ray needed)."""

import sys

import pytest

from ulorl.config import ConfigError, load_run_config
from ulorl.distributed.placement import LocalPlacement, build_placement
from ulorl.distributed.ray_engine import split_evenly
from ulorl.rollout.engines.base import EngineStats, sum_stats


def test_defaults_are_one_local_process():
    d = load_run_config(None, []).distributed
    assert (d.backend, d.num_engines, d.learner_procs, d.ray_address) == ("local", 1, 1, None)
    assert isinstance(build_placement(load_run_config(None, [])), LocalPlacement)
    d = load_run_config(None, ["distributed.backend=ray", "distributed.num_engines=4", "distributed.learner_procs=2",
                               "distributed.ray_address=auto", "distributed.gpus_per_learner=1"]).distributed
    assert (d.num_engines, d.learner_procs, d.ray_address, d.gpus_per_learner) == (4, 2, "auto", 1.0)


@pytest.mark.parametrize("overrides, message", [
    (["distributed.backend=mpi"], "distributed.backend='mpi' is not allowed; choose one of: local, ray"),
    (["distributed.sharding=zero3"], "choose one of: auto, replicate, fsdp2"),
    (["distributed.num_engines=2"], "need distributed.backend=ray (backend=local is one process)"),
    (["distributed.backend=ray", "distributed.learner_procs=0"], "distributed.learner_procs=0 must be >= 1"),
    (["distributed.backend=ray", "distributed.cpus_per_engine=-1"], "distributed.cpus_per_engine=-1.0 must be >= 0"),
    (["distributed.backend=ray", "distributed.ray_address=auto", "distributed.num_cpus=4"],
     "distributed.num_cpus sizes a local Ray cluster"),
    (["distributed.workers=2"], "unknown config key distributed.workers"),
    (["train.sequence_parallel=2"], "must divide distributed.learner_procs=1 (distributed.backend=ray)"),
    (["distributed.backend=ray", "distributed.learner_procs=6", "train.sequence_parallel=4"],
     "must divide distributed.learner_procs=6"),
    (["train.sequence_parallel=0"], "train.sequence_parallel=0 must be > 0"),
])
def test_bad_values_name_the_key(overrides, message):
    with pytest.raises(ConfigError) as e:
        load_run_config(None, overrides)
    assert message in str(e.value)


def test_ray_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    cfg = load_run_config(None, ["distributed.backend=ray"])
    with pytest.raises(ImportError, match=r"pip install 'ulorl\[ray\]'"):
        build_placement(cfg)


def test_ray_on_cuda_needs_gpus_for_the_actors():
    cfg = load_run_config(None, ["distributed.backend=ray", "train.device=cuda", "distributed.gpus_per_engine=1"])
    with pytest.raises(ConfigError, match="distributed.gpus_per_learner=0.0"):
        build_placement(cfg)  # fails before connecting to any cluster


def test_split_evenly_and_sum_stats():
    # 7 prefixes over 3 actors: 7 = 3 + 2 + 2, contiguous and in order
    assert split_evenly(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert split_evenly(1, 2) == [(0, 1), (1, 1)]  # an empty chunk: that actor is not called
    a = EngineStats(decode_iterations=3, decode_slots=10, useful_tokens=8, prefill_tokens=5, prefill_padded_tokens=6,
                    extra={"calls": 1})
    b = EngineStats(decode_iterations=4, decode_slots=6, useful_tokens=6, prefill_tokens=7, prefill_padded_tokens=9,
                    extra={"calls": 2})
    assert sum_stats([a, b]) == EngineStats(7, 16, 14, 12, 15, {"calls": 3})
