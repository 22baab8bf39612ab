"""User reward functions: file paths, verl and TRL styles, weights, extra metrics, range and failure checks."""

import re
import textwrap

import pytest

from ulorl.config.loader import ConfigError, build
from ulorl.reward import RewardFunctionError, RewardManager, RewardStyle, RewardValueError
from ulorl.config import RewardConfig, RewardFnConfig
from ulorl.reward.registry import check_signature, detect_style, load_function

USER_CODE = textwrap.dedent(
    """
    import math

    def verl_score(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": float(ground_truth in solution_str), "acc": ground_truth in solution_str, "pred": "text"}

    def trl_length(completions, ground_truth, **kwargs):
        # 1 for a completion shorter than 10 characters, None (does not apply) when the hint column says "skip"
        return [None if h == "skip" else float(len(c) < 10) for c, h in zip(completions, kwargs["hint"])]

    def too_big(completions, **kwargs):
        return [1.1 for _ in completions]

    def nan_reward(data_source, solution_str, ground_truth, extra_info=None):
        return math.nan

    def broken(completions, **kwargs):
        raise KeyError("solution")

    def mostly_broken(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str != "ok":
            raise ValueError("cannot parse " + solution_str)
        return 1.0

    def needs_solution(completions, solution, **kwargs):
        return [0.0 for _ in completions]

    def ambiguous(a, b):
        return 0.0
    """
)


@pytest.fixture
def user_file(tmp_path):
    """A reward file in a folder that is NOT on sys.path: only the file-path form can load it."""
    path = tmp_path / "rewards_dir" / "my_reward.py"
    path.parent.mkdir()
    path.write_text(USER_CODE)
    return str(path)


def test_file_path_loads_and_styles_are_detected(user_file):
    verl = load_function(f"{user_file}:verl_score")
    trl = load_function(f"{user_file}:trl_length")
    assert detect_style(verl) is RewardStyle.VERL and detect_style(trl) is RewardStyle.BATCH
    with pytest.raises(ValueError, match="cannot tell how to call.*declare"):
        detect_style(load_function(f"{user_file}:ambiguous"))
    assert detect_style(load_function(f"{user_file}:ambiguous"), "verl") is RewardStyle.VERL
    check_signature(load_function(f"{user_file}:needs_solution"), RewardStyle.BATCH, "needs_solution")  # a key
    with pytest.raises(ValueError, match="must accept"):
        check_signature(lambda x: 0.0, RewardStyle.VERL, "one_arg")


def test_a_batch_function_takes_its_other_required_parameters_from_every_rows_extra_info(user_file):
    """TRL passes a dataset's columns; ulorl passes the rows' extra_info keys: a required parameter that is neither
    a column ulorl passes nor a key of some row is refused when the data is loaded, naming the row."""
    from types import SimpleNamespace

    from ulorl.reward.registry import batch_needs

    fn = load_function(f"{user_file}:needs_solution")
    assert batch_needs(fn) == ["solution"] and batch_needs(load_function(f"{user_file}:trl_length")) == []
    cfg = RewardConfig(fns=[RewardFnConfig("exact"), RewardFnConfig(f"{user_file}:needs_solution")])
    rows = [SimpleNamespace(prompt_id=i, extra_info={"solution": "s", "index": i}) for i in range(3)]
    cfg.check_rows(rows, "data.train")  # every row holds it
    rows[1] = SimpleNamespace(prompt_id=7, extra_info={"index": 7})
    with pytest.raises(ValueError, match=r"^reward\.fns\[1\]\.fn: reward function 'needs_solution' \(style batch\) "
                                         r"requires \['solution'\], which ulorl passes from the rows' extra_info keys; "
                                         r"row 7 of data\.train has none such \(its extra_info keys: \['index'\]\): "
                                         r"add them to the data, or give those parameters defaults$"):
        cfg.check_rows(rows, "data.train")
    with pytest.raises(ValueError, match=r"^reward\.fn: .*row 0 of x\.jsonl .*keys: none\)"):
        RewardConfig(fn=f"{user_file}:needs_solution").check_rows([SimpleNamespace(prompt_id=0, extra_info=None)],
                                                                   "x.jsonl")
    # scored with the key's values, one list per key
    with RewardManager(RewardConfig(fn=f"{user_file}:needs_solution", num_workers=1)) as rm:
        assert rm.score(["a", "b"], ["1", "2"], extra_infos=[{"solution": "x"}, {"solution": "y"}]) == [0.0, 0.0]


def test_config_checks_import_and_signature_at_construction(user_file):
    # the report: a file path failed with "No module named '<dir>/my_reward'"
    assert RewardConfig(fn=f"{user_file}:verl_score").fn.endswith(":verl_score")
    with pytest.raises(ValueError, match=r"reward\.fn: cannot load.*no_such"):
        RewardConfig(fn=f"{user_file}:no_such")
    with pytest.raises(ValueError, match="no such file"):
        RewardConfig(fn="missing_dir/nope.py:f")
    RewardConfig(fns=[RewardFnConfig(f"{user_file}:needs_solution")])  # `solution` comes from the rows' extra_info
    with pytest.raises(ValueError, match="either reward.fn"):
        RewardConfig(fn="exact", fns=[RewardFnConfig("rule")])
    with pytest.raises(ValueError, match="appear twice"):
        RewardConfig(fns=[RewardFnConfig("exact"), RewardFnConfig("exact")])
    with pytest.raises(ValueError, match="max_error_frac"):
        RewardConfig(max_error_frac=1.5)
    # YAML / dotted overrides build the list of functions through the typed loader
    cfg = build(RewardConfig, {"fns": [{"fn": "exact", "weight": 2}, {"fn": f"{user_file}:trl_length",
                                                                        "name": "short", "max": 1}]})
    assert [(f.name, f.weight, f.max) for f in cfg.fns] == [("exact", 2.0, None), ("short", 1.0, 1.0)]
    with pytest.raises(ConfigError, match=r"^reward\.fns\[0\]\.fn: cannot load"):
        build(RewardConfig, {"fns": [{"fn": f"{user_file}:nope"}]}, "reward.")


def test_weighted_sum_per_function_metrics_and_extra_keys(user_file):
    cfg = RewardConfig(fns=[RewardFnConfig("exact"),
                            RewardFnConfig(f"{user_file}:trl_length", weight=0.5, name="short", min=0, max=1)])
    with RewardManager(cfg) as rm:
        rewards = rm.score([r"\boxed{4}", r"so \boxed{5}", r"\boxed{4}"], ["4", "4", "4"], ["a", "a", "a"],
                           [{"hint": "x"}, {"hint": "x"}, {"hint": "skip"}])
        m = rm.metrics()
    # exact: [1, 0, 1]; short: r"\boxed{4}" has 9 characters -> 1, "so \boxed{5}" 12 -> 0, "skip" -> None (adds 0)
    # totals = exact + 0.5 * short = [1 + 0.5, 0 + 0, 1 + 0]
    assert rewards == [1.5, 0.0, 1.0]
    assert m["rewards/exact/mean"] == pytest.approx(2 / 3)
    assert m["rewards/short/mean"] == 0.5 and m["rewards/short/std"] == 0.5  # over the 2 samples it applied to
    assert m["rewards/short/errors"] == 0.0
    assert rm.metrics().get("rewards/short/mean") is None  # means cover the span since the previous call
    with RewardManager(RewardConfig(fns=[RewardFnConfig(f"{user_file}:trl_length", weight=0.5, name="short")])) as rm:
        # "abc" -> 1, "abcdefghijkl" -> 0, weighted by 0.5
        assert rm.score(["abc", "abcdefghijkl"], ["", ""], None, [{"hint": "x"}, {"hint": "x"}]) == [0.5, 0.0]


def test_verl_function_from_file_in_workers_logs_extra_keys(user_file):
    with RewardManager(RewardConfig(fn=f"{user_file}:verl_score", num_workers=1)) as rm:
        assert rm.score(["the result is 42", "no", "42"], ["42", "42", "42"], ["a", "b", "c"]) == [1.0, 0.0, 1.0]
        m = rm.metrics()
    # "acc" (a bool) is kept as a metric, "pred" (a string) is dropped
    assert m["rewards/verl_score/acc"] == pytest.approx(2 / 3)
    assert "rewards/verl_score/pred" not in m


def test_out_of_range_and_non_finite_name_function_and_sample(user_file):
    cfg = RewardConfig(fns=[RewardFnConfig(f"{user_file}:too_big", name="big", max=1.0)])
    with RewardManager(cfg) as rm, pytest.raises(RewardValueError, match=r"'big' returned 1.1 for sample 0.*"
                                                                     r"data_source 'src'.*\[None, 1.0\]"):
        rm.score(["a"], ["1"], ["src"])
    with RewardManager(RewardConfig(fns=[RewardFnConfig(f"{user_file}:too_big")])) as rm:
        assert rm.score(["a"], ["1"]) == [1.1]  # no declared range: any finite value
    from ulorl.config.reward import RewardFnConfig as F

    def local_nan(data_source, solution_str, ground_truth, extra_info=None):
        return float("nan")

    with RewardManager(RewardConfig(fns=[F(local_nan)])) as rm, pytest.raises(RewardValueError, match="finite"):
        rm.score(["a", "b"], ["1", "2"])


def test_failing_function_stops_the_run_with_its_exception(user_file):
    cfg = RewardConfig(fns=[RewardFnConfig(f"{user_file}:broken")])
    with RewardManager(cfg) as rm, pytest.raises(RewardFunctionError,
                                                  match=r"'broken' failed on 8 of its last 8.*KeyError: 'solution'"):
        rm.score(["a"] * 8, ["1"] * 8)
    # 1.0 never stops: failures score 0 and are counted
    with RewardManager(RewardConfig(fns=[RewardFnConfig(f"{user_file}:broken")], max_error_frac=1.0)) as rm:
        assert rm.score(["a"] * 8, ["1"] * 8) == [0.0] * 8
        assert rm.metrics()["rewards/broken/errors"] == 8


def test_failure_share_is_judged_over_recent_samples():
    calls = []

    def sometimes(data_source, solution_str, ground_truth, extra_info=None):
        calls.append(solution_str)
        if solution_str.startswith("bad"):
            raise ValueError(f"cannot parse {solution_str}")
        return 1.0

    cfg = RewardConfig(fns=[RewardFnConfig(sometimes)], max_error_frac=0.5)
    with RewardManager(cfg) as rm:
        # 3 bad of 4 samples, but under 8 samples seen: not judged yet
        assert rm.score(["bad1", "bad2", "bad3", "ok"], [""] * 4) == [0.0, 0.0, 0.0, 1.0]
        # 4 more, 1 bad: 4 of 8 failed = 0.5, not more than 0.5 -> goes on
        assert rm.score(["ok", "ok", "ok", "bad4"], [""] * 4) == [1.0, 1.0, 1.0, 0.0]
        # one more bad: 5 of 9 > 0.5 -> stops, naming this batch's failing sample
        with pytest.raises(RewardFunctionError, match=r"5 of its last 9.*sample 0.*cannot parse bad5"):
            rm.score(["bad5"], [""])


def test_a_reference_that_loads_nothing_is_named_as_the_user_wrote_it(user_file, tmp_path):
    """A missing function is named by the file the user gave (not the module it was loaded as), a folder is named
    as one, and `file.py:` without a function (YAML's mapping) says that something follows the colon."""
    with pytest.raises(ValueError, match=rf"'{user_file}' has no 'nope'$"):
        RewardConfig(fn=f"{user_file}:nope")
    with pytest.raises(ValueError, match=r"'json' has no 'dumps\.nope' \(no 'nope' in it\)"):
        RewardConfig(fn="json:dumps.nope")
    with pytest.raises(ValueError, match=r"is a folder, not a Python file .*'path/to/file\.py:function'"):
        RewardConfig(fn=f"{tmp_path}/:score")
    with pytest.raises(ConfigError, match=r"^reward\.fn: expected a string, got \{'x\.py': None\} \(YAML reads "
                                          r"`x\.py:` as a mapping: something is missing after the colon\)$"):
        build(RewardConfig, {"fn": {"x.py": None}}, "reward.")


def test_a_saved_config_names_functions_passed_in_code_and_says_why_they_do_not_load():
    """`to_dict` writes a callable passed in code as `module:qualname` or `<type object>`; loaded back from a
    config.yaml, each one that only the code that ran could load says so and how to rerun."""
    import functools

    from ulorl.config.loader import to_dict

    class Scorer:
        def __call__(self, data_source, solution_str, ground_truth, extra_info=None):
            return 0.0

    def local(data_source, solution_str, ground_truth, extra_info=None):
        return 0.0

    for fn, what in ((Scorer(), "a callable object passed in code"),
                     (functools.partial(local), "a callable object passed in code"),
                     (local, "a lambda or a function defined inside another function")):
        saved = to_dict(RewardConfig(fns=[RewardFnConfig(fn)]))["fns"][0]["fn"]
        with pytest.raises(ConfigError, match=rf"^reward\.fns\[0\]\.fn={re.escape(repr(saved))} names {what}, which a "
                                              r"config cannot load: give it to Trainer\(reward_funcs=\.\.\.\) again, "
                                              r"or move it into a file and name it 'path/to/file\.py:function'$"):
            build(RewardConfig, {"fns": [{"fn": saved}]}, "reward.")
    with pytest.raises(ConfigError, match=r"names a function of the script that ran the training"):
        RewardConfig(fn="__main__:no_such_function_here")


def test_a_reward_of_text_is_no_reward_even_when_it_reads_as_a_number():
    """`"1.0"` from a verl function or `["1"]` from a batch function was taken as 1.0 while `"yes"` was refused:
    text is refused alike (the sample has no reward); bools and numpy scalars are numbers."""
    import numpy as np

    from ulorl.reward.registry import parse_result

    assert parse_result(True) == (1.0, {}) and parse_result(np.float32(0.5)) == (0.5, {})
    assert parse_result({"score": np.int64(1), "hits": 2}) == (1.0, {"hits": 2.0})
    for text in ("1.0", "yes", b"1"):
        with pytest.raises(ValueError, match=r"reward must be a number, got .*text, even a number's, is refused"):
            parse_result(text)
    with pytest.raises(ValueError, match=r"reward dict's 'score' must be a number, got str '1'"):
        parse_result({"score": "1"})

    def batch(completions, **kw):
        return ["1" for _ in completions]

    with RewardManager(RewardConfig(fns=[RewardFnConfig(batch)], max_error_frac=1.0)) as rm:
        scores = rm.score_detailed(["a", "b"], ["1", "1"])
    assert scores.rewards == [0.0, 0.0] and all("text, even a number's, is refused" in u for u in scores.uncomputed)
