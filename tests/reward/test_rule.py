"""RuleVerifier: correctness, pathological inputs, hard kills, threads, user functions.

These start real worker processes (about 1.5 s each to boot) and rely on real
hangs, so deadlines are short (TIMEOUT_S) and one verifier is shared.
"""

import textwrap
import threading
import time

import pytest

from ulorl.reward import RuleVerifier, Status

TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def verifier():
    with RuleVerifier(timeout_s=TIMEOUT_S, num_workers=2) as v:
        yield v


CASES = [  # (response, gold, expected reward)
    (r"... so \boxed{\frac{1}{2}}", "0.5", 1.0),
    (r"\boxed{1/2}", r"\frac12", 1.0),
    (r"\boxed{x^2+1}", "1+x^2", 1.0),
    (r"\boxed{\{2,1\}}", r"\{1,2\}", 1.0),
    (r"\boxed{2\sqrt{3}}", r"\sqrt{12}", 1.0),
    ("Answer: 0.75", r"\frac{3}{4}", 1.0),
    (r"\boxed{3}", "4", 0.0),
    (r"\boxed{\frac{1}{3}}", "0.5", 0.0),
    (r"first \boxed{4} then \boxed{3}", "4", 0.0),  # the last box counts
    ("so answer 7", "7", 1.0),  # built-in task format, fast path
]


def test_correct_and_wrong_answers(verifier):
    responses, golds, expected = zip(*CASES)
    verdicts = verifier.score_detailed(list(responses), list(golds))
    assert [v.score for v in verdicts] == list(expected)
    assert verdicts[-1].status is Status.FAST  # "7" == "7" never reaches math-verify
    assert verdicts[0].status is Status.OK and verdicts[0].prediction == r"\frac{1}{2}"


def test_fast_path_normalisation_and_counter(verifier):
    before = verifier.counters["reward/fast_path"]
    assert verifier.score([r"\boxed{ x + 1 }", "Answer: $12$"], ["x+1", "12"]) == [1.0, 1.0]
    assert verifier.counters["reward/fast_path"] - before == 2


def test_pathological_inputs_score_zero_within_deadline(verifier):
    verifier.metrics()  # reset the delta counters
    patho = {
        "power_tower": r"\boxed{5^{5^{5^{5^5}}}}",
        "one_megabyte": r"\boxed{" + "1+" * 500_000 + "1}",
        "deep_braces": r"\boxed{" + "{" * 2000 + "1" + "}" * 2000 + "}",
        "invalid_latex": r"\boxed{\frac{1}{\left(2}\sqrt[}",
        "binary_garbage": "\\boxed{\x00\xff\x1b[31m\ud800}",
        "empty": r"\boxed{}",
        "no_answer": "I give up.",
    }
    responses = list(patho.values()) + [r"\boxed{\frac{2}{4}}"]
    golds = ["5"] * len(patho) + ["0.5"]
    verdicts = verifier.score_detailed(responses, golds)
    assert [v.score for v in verdicts] == [0.0] * len(patho) + [1.0]
    status = dict(zip(patho, (v.status for v in verdicts)))
    assert status["power_tower"] is Status.TIMEOUT
    assert status["deep_braces"] is Status.TIMEOUT
    assert status["one_megabyte"] is Status.TOO_LONG
    assert status["empty"] is Status.NO_ANSWER and status["no_answer"] is Status.NO_ANSWER
    # the two hanging items were killed at their deadline (TIMEOUT above, two restarts below): no wall-clock
    # bound is asserted, since that would depend on the machine's speed
    m = verifier.metrics()
    assert m["reward/timeouts"] == 2 and m["reward/too_long"] == 1 and m["reward/no_answer"] == 2
    assert m["reward/worker_restarts"] == 2
    # the verifier keeps working after the kills
    assert verifier.score([r"\boxed{\frac{6}{8}}"], ["0.75"]) == [1.0]


def test_runs_from_non_main_thread(verifier):
    out = {}

    def work():
        try:
            out["scores"] = verifier.score([r"\boxed{\frac{1}{2}}", r"\boxed{2}"], ["0.5", "3"])
        except BaseException as e:  # pragma: no cover - reported below
            out["error"] = e

    t = threading.Thread(target=work)
    t.start()
    t.join(60)
    assert out == {"scores": [1.0, 0.0]}


def test_exact_fn_needs_no_workers():
    with RuleVerifier(fn="exact") as v:
        assert v.score(["so answer 7", r"\boxed{1/2}"], ["7", "0.5"]) == [1.0, 0.0]  # string match only


def test_length_mismatch_is_an_error(verifier):
    with pytest.raises(ValueError, match="ground_truths"):
        verifier.score(["a", "b"], ["a"])


USER_MODULE = textwrap.dedent(
    """
    import os, time

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "hang":
            time.sleep(1000)
        if solution_str == "crash":
            os._exit(3)
        if solution_str == "raise":
            raise RuntimeError("boom")
        if solution_str == "dict":
            return {"score": 0.5, "acc": True}
        if solution_str == "bad_dict":
            return {"acc": 1.0}
        bonus = 0.25 if (extra_info or {}).get("bonus") else 0.0
        return float(solution_str == ground_truth) + bonus + (data_source == "double")
    """
)


def test_user_function_hard_kill_from_thread(tmp_path, monkeypatch):
    (tmp_path / "ulorl_test_user_reward.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    responses = ["a", "hang", "b", "raise", "x", "crash", "dict", "bad_dict", "c", "a"]
    golds = ["a", "?", "b", "?", "y", "?", "?", "?", "c", "a"]
    sources = ["s"] * 9 + ["double"]
    extras = [None] * 8 + [{"bonus": True}, None]
    expected = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5, 0.0, 1.25, 2.0]
    out = {}

    def work():  # created, used and closed in a non-main thread
        try:
            # one chunk of 10: the hang sits in the middle of it
            with RuleVerifier(timeout_s=TIMEOUT_S, num_workers=1, fn="ulorl_test_user_reward:compute_score",
                              chunk_size=10) as v:
                out["verdicts"] = v.score_detailed(responses, golds, sources, extras)
                out["metrics"] = v.metrics()
        except BaseException as e:  # pragma: no cover - reported below
            out["error"] = e

    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert "error" not in out, out.get("error")
    verdicts = out["verdicts"]
    assert [v.score for v in verdicts] == expected  # neighbours of the hang keep their scores
    assert verdicts[1].status is Status.TIMEOUT
    assert [verdicts[i].status for i in (3, 5, 7)] == [Status.ERROR] * 3  # raise, crash, dict w/o score
    m = out["metrics"]
    assert m["reward/timeouts"] == 1 and m["reward/errors"] == 3
    assert m["reward/worker_restarts"] == 3  # killed after the hang; the crash killed two workers (run again once)


def test_interrupted_call_does_not_leak_results_into_the_next(tmp_path, monkeypatch):
    (tmp_path / "ulorl_test_slow_reward.py").write_text(
        "import time\n"
        "def score(ds, s, gt, extra=None):\n"
        "    time.sleep(0.3)\n"
        "    return float(s == gt)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with RuleVerifier(timeout_s=TIMEOUT_S, num_workers=1, fn="ulorl_test_slow_reward:score") as v:
        v.score(["a"], ["a"])  # worker up
        pool = v._pool
        real_wait = __import__("ulorl.reward.pool", fromlist=["mp_wait"]).mp_wait
        calls = {"n": 0}

        def interrupting_wait(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt
            return real_wait(*args, **kwargs)

        monkeypatch.setattr("ulorl.reward.pool.mp_wait", interrupting_wait)
        with pytest.raises(KeyboardInterrupt):
            v.score(["x"] * 5, ["y"] * 5)  # all 0.0, interrupted mid-chunk
        monkeypatch.setattr("ulorl.reward.pool.mp_wait", real_wait)
        assert v.score(["a", "b"], ["a", "b"]) == [1.0, 1.0]  # no stale 0.0 from the interrupted call
        assert pool.restarts == 1


def test_dead_zygote_is_restarted(tmp_path, monkeypatch):
    import os
    import signal

    from tests.procs import running

    (tmp_path / "ulorl_test_zygote_reward.py").write_text(
        "import os\n"
        "def score(ds, s, gt, extra=None):\n"
        "    if s == 'crash':\n"
        "        os._exit(3)\n"
        "    return float(s == gt)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    # a generous deadline: nothing here waits for it, and a slow machine's new zygote and fork stay inside it
    with RuleVerifier(timeout_s=60.0, num_workers=1, fn="ulorl_test_zygote_reward:score") as v:
        v.wait_ready()
        zygote = v._pool._state["boot"].result()
        workers = v._pool.pids
        os.kill(zygote.proc.pid, signal.SIGKILL)  # e.g. the OOM killer; its workers die with it
        zygote.proc.wait()
        give_up = time.monotonic() + 60.0
        while any(running(pid) for pid in workers):  # they go by PR_SET_PDEATHSIG, a moment later
            assert time.monotonic() < give_up, f"workers {workers} outlived their zygote by 60 s"
            os.sched_yield()
        # the dead worker and the crashing item each need a replacement worker, hence a new zygote
        assert v.score(["a", "crash", "b"], ["a", "?", "b"]) == [1.0, 0.0, 1.0]
        assert v._pool._state["boot"].result() is not zygote
        m = v.metrics()
        assert m["reward/errors"] == 1 and m["reward/timeouts"] == 0  # the item killed two workers: its own fault


def test_plain_numbers_are_settled_without_workers():
    from ulorl.reward.rule import plain_numbers_equal

    # both plain decimals: exact comparison in the trainer process (3 != 7, 0.50 == 0.5)
    assert plain_numbers_equal("3", "7") is False
    assert plain_numbers_equal("0.50", "0.5") is True
    assert plain_numbers_equal("$-2$", "-2") is True
    # anything else needs math-verify
    assert plain_numbers_equal("1/2", "0.5") is None and plain_numbers_equal("\\frac12", "0.5") is None


def test_first_use_long_after_the_startup_deadline_works():
    # regression: a zygote that had long said "ready" was refused once its start-up deadline had passed,
    # because the deadline was checked before the message was read (a run died at step 280 this way)
    with RuleVerifier(timeout_s=TIMEOUT_S, num_workers=1, fast_path=False, startup_timeout_s=3.0) as v:
        zygote = v._pool._state["boot"].result()
        assert zygote.conn.poll(60), "the zygote never became ready"  # its "ready" waits, unread
        time.sleep(max(0.0, zygote.started_at + zygote.startup_timeout_s - time.monotonic()) + 0.2)
        assert v.score([r"\boxed{2}", r"\boxed{3}"], ["2", "2"]) == [1.0, 0.0]
