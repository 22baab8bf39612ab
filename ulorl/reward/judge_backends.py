"""The judge's chat backends: a local Hugging Face model or an OpenAI-compatible server (`judge.py` uses them).

- `OpenAIChatBackend`: ``POST {url}/v1/chat/completions`` with ``http.client`` from the standard library, a
  thread pool for concurrency and a total deadline per request (`_post_with_deadline`: a server dripping bytes
  cannot hold it). The API key is read from the environment variable *named* by ``api_key_env``, never stored
  in a config, logged or shown in ``repr``.
- `HFChatBackend`: a local model (``AutoModelForCausalLM`` + ``AutoTokenizer``, chat template, greedy
  ``generate`` in batches, ``max_time`` as the deadline; ``trust_remote_code`` False unless asked for).

A backend returns one reply per conversation, or the exception of the one that failed (`JudgeError`,
`JudgeTimeout`); the verifier counts them and falls back to the rule verdict.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Protocol


class JudgeError(RuntimeError):
    """The judge backend failed (HTTP error, malformed response, ...)."""


class JudgeTimeout(JudgeError):
    """The judge backend did not answer in time."""


Messages = list[dict[str, str]]


class ChatBackend(Protocol):
    """Turns conversations into replies; a failed item is an exception in the list."""

    def chat_many(self, conversations: Sequence[Messages]) -> list[str | BaseException]: ...

    def close(self) -> None: ...


class OpenAIChatBackend:
    """Client for an OpenAI-compatible ``/v1/chat/completions`` endpoint (stdlib only).

    Args:
        url: server root, e.g. ``http://127.0.0.1:8000`` (``/v1`` is added unless present).
        model_name: the ``model`` field of the request.
        api_key_env: NAME of the environment variable holding the key (sent as
            ``Authorization: Bearer``); ``None`` sends no key.
        timeout_s: total deadline per request (connect, send, every read); a batch also has an overall
            deadline of ``timeout_s`` per wave of ``max_concurrency`` requests.
        max_tokens: reply budget.
        max_concurrency: parallel requests (threads).
    """

    def __init__(
        self,
        url: str,
        model_name: str = "judge",
        *,
        api_key_env: str | None = None,
        timeout_s: float = 30.0,
        max_tokens: int = 64,
        max_concurrency: int = 8,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"judge url must start with http:// or https://, got {url!r}")
        base = url.rstrip("/")
        self.endpoint = base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")
        self.model_name = model_name
        self.timeout_s = float(timeout_s)
        self.max_tokens = max_tokens
        self.max_concurrency = max_concurrency
        self.api_key_env = api_key_env
        self.__api_key: str | None = None
        if api_key_env is not None:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(
                    f"api_key_env={api_key_env!r}: that environment variable is not set or empty"
                )
            self.__api_key = key
        self._executor = ThreadPoolExecutor(max_concurrency, thread_name_prefix="ulorl-judge")

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIChatBackend(endpoint={self.endpoint!r}, model={self.model_name!r}, api_key_env={self.api_key_env!r})"

    def _post(self, messages: Messages) -> str:
        body = json.dumps(
            {"model": self.model_name, "messages": messages, "temperature": 0.0, "max_tokens": self.max_tokens}
        ).encode()
        headers = {"Content-Type": "application/json"}
        if self.__api_key:
            headers["Authorization"] = f"Bearer {self.__api_key}"
        status, raw = _post_with_deadline(self.endpoint, body, headers, self.timeout_s)
        if status != 200:
            raise JudgeError(f"judge HTTP {status}")
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise JudgeError(f"bad judge response: {type(e).__name__}") from None
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise JudgeError("judge response has no choices[0].message.content") from None
        if not isinstance(content, str):
            raise JudgeError("judge message content is not a string")
        return content

    def chat_many(self, conversations: Sequence[Messages]) -> list[str | BaseException]:
        if not conversations:
            return []
        futures = [self._executor.submit(self._post, c) for c in conversations]
        waves = math.ceil(len(conversations) / self.max_concurrency)
        futures_wait(futures, timeout=self.timeout_s * (waves + 1))
        out: list[str | BaseException] = []
        for f in futures:
            if not f.done():
                f.cancel()
                out.append(JudgeTimeout("judge batch deadline passed"))
            elif f.exception() is not None:
                out.append(f.exception())
            else:
                out.append(f.result())
        return out

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


MAX_REPLY_BYTES = 1 << 20  # a judge reply is a few words; a larger body is a failure, not read to the end


def _post_with_deadline(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> tuple[int, bytes]:
    """POST `body` and read the reply within `timeout_s` seconds IN TOTAL: (HTTP status, body).

    A socket timeout restarts with every byte received, so a server that drips one byte every few seconds
    kept a judge thread (and the trainer's exit, which joins it) alive for ever. Here a timer shuts the
    socket down at the deadline, which ends any read at once. Raises JudgeTimeout / JudgeError."""
    parts = urllib.parse.urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname, parts.port, timeout=timeout_s)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.connect()  # bounded by the socket timeout; the timer cannot shut a socket that does not exist yet
        if expired.is_set():
            raise TimeoutError
        conn.request("POST", path or "/", body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read(MAX_REPLY_BYTES + 1)
        if expired.is_set():
            raise TimeoutError
        if len(raw) > MAX_REPLY_BYTES:
            raise JudgeError(f"judge reply larger than {MAX_REPLY_BYTES} bytes")
        return resp.status, raw
    except (TimeoutError, socket.timeout):
        raise JudgeTimeout(f"no reply from judge within {timeout_s}s") from None
    except (OSError, http.client.HTTPException, ValueError) as e:
        if expired.is_set():
            raise JudgeTimeout(f"no complete reply from judge within {timeout_s}s") from None
        if isinstance(e, OSError):
            raise JudgeError(f"judge unreachable or connection lost: {e.strerror or e}") from None
        raise JudgeError(f"bad judge response: {type(e).__name__}") from None
    finally:
        timer.cancel()
        conn.close()


class HFChatBackend:
    """A local Hugging Face chat model as judge (greedy decoding, batched).

    Args:
        model_path: local directory with the model and tokenizer (no download).
        trust_remote_code: allow custom modelling code from that directory (default False).
        timeout_s: ``generate(max_time=...)`` per batch; a batch that reaches it
            counts as timed out.
        max_new_tokens: reply budget.
        batch_size: conversations per ``generate`` call.
        device: ``"cuda"`` when available else ``"cpu"`` by default.
    """

    def __init__(
        self,
        model_path: str,
        *,
        trust_remote_code: bool = False,
        timeout_s: float = 30.0,
        max_new_tokens: int = 16,
        batch_size: int = 16,
        device: str | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not os.path.isdir(model_path):
            raise ValueError(f"judge_model_path {model_path!r} is not a local directory")
        self._torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(
            model_path, trust_remote_code=trust_remote_code, local_files_only=True
        )
        if self.tokenizer.chat_template is None:
            raise ValueError(f"judge model at {model_path!r} has no chat template")
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(
            model_path, trust_remote_code=trust_remote_code, local_files_only=True, dtype="auto"
        ).to(self.device)
        self.model.eval()
        self.timeout_s = float(timeout_s)
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self._lock = threading.Lock()

    def _generate(self, batch: Sequence[Messages]) -> list[str]:
        tok = self.tokenizer
        texts = [
            tok.apply_chat_template(list(c), tokenize=False, add_generation_prompt=True, enable_thinking=False)
            for c in batch
        ]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        start = time.monotonic()
        with self._torch.no_grad():
            out = self.model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=self.max_new_tokens,
                max_time=self.timeout_s,
                pad_token_id=tok.pad_token_id,
            )
        if time.monotonic() - start >= self.timeout_s:
            raise JudgeTimeout(f"local judge generate reached max_time={self.timeout_s}s")
        return tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)

    def chat_many(self, conversations: Sequence[Messages]) -> list[str | BaseException]:
        out: list[str | BaseException] = []
        with self._lock:
            for i in range(0, len(conversations), self.batch_size):
                batch = conversations[i : i + self.batch_size]
                try:
                    out.extend(self._generate(batch))
                except JudgeTimeout as e:
                    out.extend([e] * len(batch))
                except Exception as e:  # noqa: BLE001 - any model failure falls back to the rule
                    out.extend([JudgeError(f"{type(e).__name__}: {e}")] * len(batch))
        return out

    def close(self) -> None:
        pass
