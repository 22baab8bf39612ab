"""Every bad-row kind, under both on_bad_row policies; errors name file, row and field."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ulorl.data import DataError, load_source
from ulorl.config import DataConfig
from ulorl.models.tokenizer import build_tokenizer

GOOD = {"prompt": "add 1 2", "answer": "3"}
# (raw JSONL line of the bad row, field named in the error, reason key)
BAD_ROWS = {
    "missing answer": (json.dumps({"prompt": "add 1 2"}), "answer", "missing_field"),
    "blank answer": (json.dumps({"prompt": "add 1 2", "answer": "  "}), "answer", "missing_field"),
    "answer wrong type": (json.dumps({"prompt": "add 1 2", "answer": [3]}), "answer", "wrong_type"),
    "answer is a bool": (json.dumps({"prompt": "add 1 2", "answer": True}), "answer", "wrong_type"),
    "prompt wrong type": (json.dumps({"prompt": 12, "answer": "3"}), "prompt", "wrong_type"),
    "empty prompt": (json.dumps({"prompt": "   ", "answer": "3"}), "prompt", "empty_prompt"),
    "empty messages": (json.dumps({"prompt": [], "answer": "3"}), "prompt", "empty_prompt"),
    "invalid utf-8": (b'{"prompt": "add \xff 2", "answer": "3"}', "prompt", "undecodable_text"),
    "lone surrogate": ('{"prompt": "add 1 2", "answer": "\\ud800"}', "answer", "undecodable_text"),
    "messages not dicts": (json.dumps({"prompt": ["add 1 2"], "answer": "3"}), "prompt[0]", "bad_messages"),
    "message without content": (json.dumps({"prompt": [{"role": "user"}], "answer": "3"}), "prompt[0]",
                                "bad_messages"),
    "content not a string": (json.dumps({"prompt": [{"role": "user", "content": 5}], "answer": "3"}),
                             "prompt[0].content", "bad_messages"),
    "not json": ("{prompt: add", "<row>", "invalid_json"),
    "not an object": ("[1, 2]", "<row>", "wrong_type"),
    "extra_info wrong type": (json.dumps({"prompt": "a", "answer": "3", "extra_info": "x"}), "extra_info",
                              "wrong_type"),
}


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def write(tmp_path, bad_line: str | bytes) -> str:
    bad = bad_line if isinstance(bad_line, bytes) else bad_line.encode("utf-8", errors="surrogatepass")
    good = json.dumps(GOOD).encode()
    path = tmp_path / "data.jsonl"
    path.write_bytes(good + b"\n\n" + good + b"\n" + bad + b"\n" + good + b"\n")  # the bad row is row 2
    return str(path)


@pytest.mark.parametrize("kind", list(BAD_ROWS))
def test_bad_row_raises_naming_file_row_field(tmp_path, tok, kind):
    line, field, reason = BAD_ROWS[kind]
    path = write(tmp_path, line)
    with pytest.raises(DataError) as e:
        load_source(path, tok, DataConfig())
    msg = str(e.value)
    assert path in msg and "row 2," in msg and f"field '{field}'" in msg and "expected" in msg and reason in msg


@pytest.mark.parametrize("kind", list(BAD_ROWS))
def test_bad_row_skipped_and_counted(tmp_path, tok, kind):
    line, field, reason = BAD_ROWS[kind]
    recs, rep = load_source(write(tmp_path, line), tok, DataConfig(on_bad_row="skip"))
    assert [r.prompt_id for r in recs] == [0, 1, 3]
    assert (rep.n_rows, rep.n_loaded, rep.n_skipped) == (4, 3, 1)
    assert rep.skipped_by_reason == {reason: 1}
    assert len(rep.examples) == 1 and f"field '{field}'" in rep.examples[0]


def test_error_counts_further_bad_rows(tmp_path, tok):
    p = tmp_path / "d.jsonl"
    p.write_text("".join(json.dumps({"prompt": "q"}) + "\n" for _ in range(3)))
    with pytest.raises(DataError, match=r"row 0, field 'answer'.*\(2 more bad rows\)"):
        load_source(str(p), tok, DataConfig())
    p.write_text("".join(json.dumps({"prompt": "q"}) + "\n" for _ in range(2)))
    with pytest.raises(DataError, match=r"row 0, field 'answer'.*\(1 more bad row\);"):
        load_source(str(p), tok, DataConfig())


def test_parquet_bad_rows(tmp_path, tok):
    rows = [{"data_source": "m", "prompt": [{"role": "user", "content": "q"}],
             "reward_model": {"ground_truth": "1"}},
            {"data_source": "m", "prompt": [{"role": "user", "content": "q"}],
             "reward_model": {"ground_truth": None}},
            {"data_source": "m", "prompt": [{"role": "user", "content": ""}],
             "reward_model": {"ground_truth": "2"}}]
    p = tmp_path / "v.parquet"
    pq.write_table(pa.Table.from_pylist(rows), p)
    with pytest.raises(DataError, match=r"v.parquet: row 1, field 'reward_model.ground_truth'"):
        load_source(str(p), tok, DataConfig())
    recs, rep = load_source(str(p), tok, DataConfig(on_bad_row="skip"))
    assert [r.prompt_id for r in recs] == [0]
    assert rep.skipped_by_reason == {"missing_field": 1, "empty_prompt": 1}


def test_template_rejection_is_a_bad_row(tmp_path):
    strict = build_tokenizer()
    strict.chat_template = ("{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}"
                            "{{ raise_exception('bad role') }}{% endif %}{{ m['content'] }}{% endfor %}")
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(GOOD) + "\n" + json.dumps({"prompt": [{"role": "tool", "content": "x"}],
                                                       "answer": "1"}) + "\n")
    with pytest.raises(DataError, match="row 1, field 'prompt'.*chat template.*set data.on_bad_row=skip"):
        load_source(str(p), strict, DataConfig())
    recs, rep = load_source(str(p), strict, DataConfig(on_bad_row="skip"))
    assert len(recs) == 1 and rep.skipped_by_reason == {"bad_messages": 1}
