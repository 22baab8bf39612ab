"""Generative verifier: a real OpenAI-style HTTP server on loopback, and a tiny local HF model."""

import http.server
import json
import re
import threading
import time

import pytest

from ulorl.reward import GenerativeVerifier, RewardManager, parse_verdict
from ulorl.config import RewardConfig

EQUIVALENT = {("27cm", "0.27m"), ("one half", "1/2")}
KEY_ENV = "ULORL_TEST_JUDGE_KEY"
SECRET = "sk-test-5f3a9c-not-a-real-key"


class QuietServer(http.server.ThreadingHTTPServer):
    """A slow handler's reply to a client that timed out hits a closed socket after its test has ended; the default
    `handle_error` prints that traceback to stderr, into whichever test runs then (one that asserts on stderr
    fails)."""

    def handle_error(self, request, client_address):
        pass


class JudgeServer:
    """Minimal ``/v1/chat/completions`` server; ``behaviour`` is ok | slow | garbage."""

    def __init__(self, behaviour="ok", required_key=None, delay_s=3.0, barrier=None):
        state = self
        self.requests = []
        self.auth_headers = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                state.requests.append((self.path, body))
                state.auth_headers.append(self.headers.get("Authorization"))
                if required_key is not None and self.headers.get("Authorization") != f"Bearer {required_key}":
                    self.send_response(401)
                    self.end_headers()
                    return
                prompt = body["messages"][-1]["content"]
                pred = re.search(r"Predicted answer: (.*)", prompt).group(1)
                ref = re.search(r"Reference answer: (.*)", prompt).group(1)
                if behaviour == "slow":
                    time.sleep(delay_s)
                    reply = "YES"
                elif behaviour == "ok_after_delay":
                    time.sleep(delay_s)
                    reply = "YES" if (pred, ref) in EQUIVALENT else "NO"
                elif behaviour == "ok_when_all_in_flight":
                    try:
                        barrier.wait()
                    except threading.BrokenBarrierError:
                        self.send_response(500)
                        self.end_headers()
                        return
                    reply = "YES" if (pred, ref) in EQUIVALENT else "NO"
                elif behaviour == "garbage":
                    reply = "Well, it depends: yes and no."
                else:
                    ok = (pred, ref) in EQUIVALENT or pred == ref
                    reply = "Both denote the same length. YES" if ok else "NO"
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


RESPONSES = [r"\boxed{27cm}", r"\boxed{3}", r"\boxed{one half}", r"\boxed{\frac{1}{2}}", "no final answer"]
GOLDS = ["0.27m", "4", "1/2", "0.5", "1"]
RULE = [0.0, 0.0, 0.0, 0.0, 0.0]  # fn="exact": string match only, all differ


def test_parse_verdict_is_strict():
    assert parse_verdict("YES") is True
    assert parse_verdict("The two values are equal.\n**YES**") is True
    assert parse_verdict("no") is False
    assert parse_verdict("<think>maybe yes, maybe not</think> NO") is False  # reasoning ignored
    assert parse_verdict("YES or NO") is None  # both verdict words
    assert parse_verdict("YES, they match.") is None  # verdict not the final word
    assert parse_verdict("") is None
    assert parse_verdict("<think>unfinished YES") is None


def test_rule_then_judge_with_endpoint():
    with JudgeServer("ok") as server:
        cfg = RewardConfig(fn="exact", judge="rule_then_judge", judge_url=server.url, judge_model_name="m1")
        with RewardManager(cfg) as rm:
            rewards = rm.score(RESPONSES, GOLDS, ["math"] * 5, [{"question": "Q?"}] * 5)
            m = rm.metrics()
    # 27cm == 0.27m and "one half" == 1/2 by the judge; 3 != 4; \frac{1}{2} vs 0.5 is not in the
    # server's table (NO); no answer -> never sent to the judge.
    assert rewards == [1.0, 0.0, 1.0, 0.0, 0.0]
    assert m["reward/judge_calls"] == 4 and m["reward/judge_flips"] == 2
    assert m["reward/judge_failures"] == 0 and m["reward/judge_timeouts"] == 0
    path, body = server.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "m1" and body["temperature"] == 0.0
    assert "Q?" in body["messages"][0]["content"]
    assert all(h is None for h in server.auth_headers)  # no key configured, none sent


def test_rule_then_judge_skips_items_the_rule_accepts():
    with JudgeServer("ok") as server:
        with RewardManager(RewardConfig(fn="exact", judge="rule_then_judge", judge_url=server.url)) as rm:
            assert rm.score([r"\boxed{5}", r"\boxed{27cm}"], ["5", "0.27m"]) == [1.0, 1.0]
    assert len(server.requests) == 1  # only the item the rule rejected


def test_judge_timeout_falls_back_to_rule():
    with JudgeServer("slow", delay_s=10.0) as server:
        cfg = RewardConfig(fn="exact", judge="judge_only", judge_url=server.url, judge_timeout_s=0.5)
        with RewardManager(cfg) as rm:
            rewards = rm.score([r"\boxed{27cm}", r"\boxed{5}"], ["0.27m", "5"])
            m = rm.metrics()
    assert rewards == [0.0, 1.0]  # the rule's verdicts (the slow server would have said YES)
    assert m["reward/judge_timeouts"] == 2 and m["reward/judge_failures"] == 0  # gave up at 0.5 s, not 10 s


def test_endpoint_requests_run_concurrently():
    # every request waits until all 8 are in flight at once (a barrier, not a clock): one at a time, the first
    # would wait alone, its barrier would break, and it would answer with an error
    with JudgeServer("ok_when_all_in_flight", barrier=threading.Barrier(8, timeout=60)) as server:
        with GenerativeVerifier.from_url(server.url, timeout_s=120.0, max_concurrency=8) as judge:
            verdicts = judge.judge(["27cm"] * 8, ["0.27m"] * 8)
    assert verdicts == [True] * 8


def test_garbage_replies_count_as_failures_and_fall_back():
    with JudgeServer("garbage") as server:
        cfg = RewardConfig(fn="exact", judge="judge_only", judge_url=server.url)
        with RewardManager(cfg) as rm:
            rewards = rm.score([r"\boxed{27cm}", r"\boxed{5}", "nothing"], ["0.27m", "5", "1"])
            m = rm.metrics()
    assert rewards == [0.0, 1.0, 0.0]
    assert m["reward/judge_failures"] == 2 and m["reward/judge_calls"] == 2


def test_api_key_from_env_sent_as_bearer_and_never_stored(monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    with JudgeServer("ok", required_key=SECRET) as server:
        cfg = RewardConfig(fn="exact", judge="judge_only", judge_url=server.url, api_key_env=KEY_ENV)
        with RewardManager(cfg) as rm:
            assert rm.score([r"\boxed{27cm}"], ["0.27m"]) == [1.0]
            assert SECRET not in repr(rm.judge.backend)
    assert server.auth_headers == [f"Bearer {SECRET}"]
    assert SECRET not in repr(cfg) and SECRET not in json.dumps(cfg.to_dict())
    assert cfg.to_dict()["api_key_env"] == KEY_ENV


def test_wrong_key_is_a_failure_and_missing_env_fails_fast(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "wrong")
    with JudgeServer("ok", required_key=SECRET) as server:
        cfg = RewardConfig(fn="exact", judge="judge_only", judge_url=server.url, api_key_env=KEY_ENV)
        with RewardManager(cfg) as rm:
            assert rm.score([r"\boxed{27cm}"], ["0.27m"]) == [0.0]  # HTTP 401 -> rule fallback
            assert rm.metrics()["reward/judge_failures"] == 1
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(ValueError, match=f"{KEY_ENV}.*not set"):
        RewardManager(RewardConfig(fn="exact", judge="judge_only", judge_url="http://127.0.0.1:9", api_key_env=KEY_ENV))


def test_unreachable_endpoint_is_a_failure():
    with JudgeServer("ok") as server:
        url = server.url
    # server closed: connection refused
    with GenerativeVerifier.from_url(url, timeout_s=2.0) as judge:
        assert judge.judge(["27cm"], ["0.27m"]) == [None]
        assert judge.counters["reward/judge_failures"] == 1


def _tiny_chat_model(path):
    """A random 1-layer Qwen3 with a word-level tokenizer that cannot spell YES or NO."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    words = "you are checking the final answer of a math problem question predicted reference".split()
    words += ["[PAD]", "[UNK]", "[EOS]", "user", "assistant", ":", "?", ".", "27cm", "0.27m", "3", "4"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")
    hf_tok.chat_template = (
        "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}assistant : {% endif %}"
    )
    hf_tok.save_pretrained(path)
    torch.manual_seed(0)
    cfg = Qwen3Config(
        vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=256,
        pad_token_id=0, eos_token_id=2, bos_token_id=2,
    )
    Qwen3ForCausalLM(cfg).save_pretrained(path)


def test_local_hf_judge_garbage_falls_back(tmp_path):
    _tiny_chat_model(tmp_path)
    cfg = RewardConfig(fn="exact", judge="rule_then_judge", judge_model_path=str(tmp_path), judge_timeout_s=20.0)
    with RewardManager(cfg) as rm:
        rewards = rm.score([r"\boxed{27cm}", r"\boxed{3}", r"\boxed{4}"], ["0.27m", "4", "4"])
        m = rm.metrics()
        reply = rm.judge.backend.chat_many([[{"role": "user", "content": "27cm 0.27m ?"}]])[0]
    assert isinstance(reply, str)  # the model ran end to end and produced (garbage) text
    assert rewards == [0.0, 0.0, 1.0]  # rule verdicts: the random model can never say YES/NO
    assert m["reward/judge_calls"] == 2 and m["reward/judge_failures"] == 2


class DripServer:
    """A raw TCP server that answers one byte of an HTTP reply every `every_s` seconds (issue 15, item 4).

    `closed` is set when the client hangs up; a per-read socket timeout never fires against it."""

    def __init__(self, every_s=0.2, max_s=60.0):
        import socket

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closed = threading.Event()
        self.every_s, self.max_s = every_s, max_s
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.sock.accept()
        conn.recv(65536)
        reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n" + b" " * 100000
        start = time.monotonic()
        try:
            for byte in reply:
                if time.monotonic() - start > self.max_s:
                    return
                conn.sendall(bytes([byte]))
                time.sleep(self.every_s)
        except OSError:  # the client hung up
            self.closed.set()
        finally:
            conn.close()
            self.sock.close()


def test_a_server_dripping_bytes_cannot_hold_a_request_past_its_deadline():
    server = DripServer(every_s=0.2)
    with GenerativeVerifier.from_url(server.url, timeout_s=1.0) as judge:
        assert judge.judge(["27cm"], ["0.27m"]) == [None]
        assert judge.counters["reward/judge_timeouts"] == 1
    # the request's own thread hung up: nothing is left reading (the process can exit). Before the total
    # deadline each byte restarted the socket timeout and the thread read on for as long as the server dripped
    assert server.closed.wait(20), "the judge client still reads from the dripping server"


def test_from_url_passes_the_backend_settings_to_each_request():
    with JudgeServer("ok") as server:
        with GenerativeVerifier.from_url(server.url, "my-judge", max_tokens=5, timeout_s=60.0) as judge:
            assert judge.judge(["27cm"], ["0.27m"]) == [True]
        (path, body), = server.requests
    assert path == "/v1/chat/completions"
    assert body["model"] == "my-judge" and body["max_tokens"] == 5


class ScriptedBackend:
    """A `ChatBackend` whose replies come from a script: one list per batch (a reply, or the exception a real
    backend returns for a call that failed)."""

    def __init__(self, batches):
        self.batches = list(batches)

    def chat_many(self, conversations):
        replies = self.batches.pop(0)
        assert len(replies) == len(conversations)
        return replies

    def close(self):
        pass


def test_a_batch_the_judge_fails_entirely_is_said_once_until_it_answers_again():
    import logging

    from ulorl.reward.judge import JudgeError, JudgeTimeout

    refused = JudgeError("judge unreachable or connection lost: Connection refused")
    batches = [[refused, refused],  # down: said
               [JudgeTimeout("no reply from judge within 2.0s")],  # still down: not said again
               [],  # nothing asked: changes nothing
               ["YES", refused],  # one answer: the judge is up
               ["NO"],
               ["maybe"]]  # down again: said

    class Lines(logging.Handler):  # on the logger itself: a run in this process may stop its propagation
        def __init__(self):
            super().__init__(logging.WARNING)
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    logger, lines = logging.getLogger("ulorl.reward.judge"), Lines()
    logger.addHandler(lines)
    try:
        judge = GenerativeVerifier(ScriptedBackend(batches))
        verdicts = [judge.judge(["a"] * len(b), ["b"] * len(b)) for b in list(batches)]
    finally:
        logger.removeHandler(lines)
    assert verdicts == [[None, None], [None], [], [True, None], [False], [None]]
    tail = ("their items keep the rule's verdict. Counted in reward/judge_failures and reward/judge_timeouts; said "
            "again only after the judge has answered")
    assert lines.lines == [
        "the judge failed every call of a batch (2; the last: JudgeError: judge unreachable or connection lost: "
        f"Connection refused): {tail}",
        f"the judge failed every call of a batch (1; the last: a reply with no single YES or NO: 'maybe'): {tail}"]
    assert judge.counters == {"reward/judge_calls": 7, "reward/judge_failures": 4, "reward/judge_timeouts": 1}


def test_a_run_prints_the_reward_layers_warnings(capsys, monkeypatch):
    import logging

    from ulorl.run.console import NOTES, show_library_notes

    for name in NOTES:  # as they were, after this test, whether or not a run in this process routed them already
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "handlers", list(logger.handlers))  # show_library_notes appends to the copy
        monkeypatch.setattr(logger, "level", logger.level)
        monkeypatch.setattr(logger, "propagate", logger.propagate)
    show_library_notes()
    logging.getLogger("ulorl.reward.judge").warning("the judge failed every call of a batch (%d)", 3)
    logging.getLogger("ulorl.reward.judge").info("not printed: the reward layer's lines from WARNING on")
    logging.getLogger("ulorl.rollout.collect").info("printed: the rollout's notes from INFO on")
    out = capsys.readouterr().out
    assert out == ("[ulorl] the judge failed every call of a batch (3)\n"
                   "[ulorl] printed: the rollout's notes from INFO on\n")
