"""Loading every supported format into PromptRecords: schemas, detection, rendering, length filter."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ulorl.data import DataError, load_prompts, load_source
from ulorl.config import DataConfig
from ulorl.models.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def verl_row(q: str, a: str, src: str = "math") -> dict:
    return {"data_source": src, "prompt": [{"role": "user", "content": q}], "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": a}, "extra_info": {"id": q}}


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_verl_parquet(tmp_path, tok):
    p = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([verl_row("add 1 2", "3"), verl_row("add 2 2", "4", "other")]), p)
    recs, rep = load_source(str(p), tok, DataConfig())
    assert [r.ground_truth for r in recs] == ["3", "4"]
    assert [r.data_source for r in recs] == ["math", "other"]
    assert recs[1].prompt_id == 1 and recs[1].extra_info == {"id": "add 2 2"}
    assert rep.n_rows == rep.n_loaded == 2 and rep.n_skipped == 0


def test_chat_template_rendering(tmp_path, tok):
    p = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "add 1 2", "answer": 3}])
    (rec,), _ = load_source(p, tok, DataConfig())
    expected = "<|im_start|>user\nadd 1 2<|im_end|>\n<|im_start|>assistant\n"
    assert rec.prompt_text == expected
    assert rec.prompt_tokens == tok(expected, add_special_tokens=False)["input_ids"]
    assert rec.ground_truth == "3"  # a numeric answer becomes its string form


def test_plain_text_without_chat_template(tmp_path):
    plain = build_tokenizer()
    plain.chat_template = None
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "add 1 2"}]
    p = write_jsonl(tmp_path / "d.jsonl", [{"prompt": msgs, "answer": "3"}])
    (rec,), _ = load_source(p, plain, DataConfig())
    assert rec.prompt_text == "be brief\n\nadd 1 2"
    assert rec.prompt_tokens == plain(rec.prompt_text)["input_ids"]


def test_jsonl_custom_keys_and_dotted_answer(tmp_path, tok):
    rows = [{"question": "q one", "sol": {"final": "7"}, "src": "s1"}]
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    cfg = DataConfig(prompt_key="question", answer_key="sol.final", data_source_key="src")
    (rec,), _ = load_source(p, tok, cfg)
    assert (rec.ground_truth, rec.data_source) == ("7", "s1")


@pytest.mark.parametrize("name,text", [("bom.jsonl", '{"prompt": "add 1 2", "answer": "3"}\n{"prompt": "x", '
                                                     '"answer": "4"}\n'),
                                       ("bom.json", '[{"prompt": "add 1 2", "answer": "3"}, {"prompt": "x", '
                                                    '"answer": "4"}]')])
def test_a_utf8_byte_order_mark_is_not_a_bad_first_row(tmp_path, tok, name, text):
    # a file saved as "UTF-8 with BOM" (Windows tools): its first row was invalid_json, and skipped with
    # data.on_bad_row=skip
    p = tmp_path / name
    p.write_text(text, encoding="utf-8-sig")
    assert p.read_bytes()[:3] == b"\xef\xbb\xbf"
    recs, report = load_source(str(p), tok, DataConfig())
    assert [r.ground_truth for r in recs] == ["3", "4"] and report.n_skipped == 0


def test_trl_parquet_auto_and_explicit(tmp_path, tok):
    p = tmp_path / "trl.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "add 1 1", "answer": "2"}]), p)
    for fmt in ("auto", "trl"):
        (rec,), _ = load_source(str(p), tok, DataConfig(format=fmt))
        assert rec.ground_truth == "2" and rec.data_source == "trl"  # data source defaults to the file stem


def test_save_to_disk_folder_and_dataset_dict(tmp_path, tok):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list([{"prompt": "add 1 1", "answer": "2"}, {"prompt": "add 2 3", "answer": "5"}])
    ds.save_to_disk(str(tmp_path / "one"))
    recs, _ = load_source(str(tmp_path / "one"), tok, DataConfig())
    assert [r.ground_truth for r in recs] == ["2", "5"]
    test = datasets.Dataset.from_list([{"prompt": "add 9 9", "answer": "18"}])
    datasets.DatasetDict({"train": ds, "test": test}).save_to_disk(str(tmp_path / "dd"))
    cfg = DataConfig(train=str(tmp_path / "dd"), eval=str(tmp_path / "dd"), format="disk", shuffle=False)
    assert [r.ground_truth for r in load_prompts(cfg, tok, "train")[0]] == ["2", "5"]
    assert [r.ground_truth for r in load_prompts(cfg, tok, "eval")[0]] == ["18"]


@pytest.mark.parametrize("name,read", [("a.csv", "pandas.read_csv('{p}')"),
                                       ("a.tsv", "pandas.read_csv('{p}', sep='\\t')"),
                                       ("a.xlsx", "pandas.read_excel('{p}')")])
def test_a_table_no_reader_takes_says_how_to_convert_it(tmp_path, tok, name, read):
    # it said "(or set data.format explicitly)", and data.format=jsonl then read every CSV line as a bad JSON row
    p = tmp_path / name
    p.write_text("prompt,answer\n1+1,2\n")
    with pytest.raises(DataError) as e:
        load_source(str(p), tok, DataConfig())
    kind = {"a.csv": "CSV", "a.tsv": "TSV", "a.xlsx": "Excel"}[name]
    assert str(e.value) == (f"{p}: {kind} files are not read; convert it to parquet or JSONL (with pandas: "
                            f"{read.format(p=p)}.to_parquet('data.parquet'))")


def test_format_override_for_unknown_extension(tmp_path, tok):
    p = tmp_path / "data.txt"
    write_jsonl(p, [{"prompt": "add 1 1", "answer": "2"}])
    with pytest.raises(DataError, match="cannot tell the format"):
        load_source(str(p), tok, DataConfig())
    (rec,), _ = load_source(str(p), tok, DataConfig(format="jsonl"))
    assert rec.ground_truth == "2"


def test_verl_schema_requires_messages(tmp_path, tok):
    p = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "plain", "reward_model": {"ground_truth": "1"}}])
    with pytest.raises(DataError, match="row 0, field 'prompt'"):
        load_source(p, tok, DataConfig(format="verl"))


def test_too_long_prompts_dropped_and_counted(tmp_path, tok):
    rows = [{"prompt": "add 1 1", "answer": "2"}, {"prompt": " ".join(["7"] * 50), "answer": "7"},
            {"prompt": "add 2 2", "answer": "4"}]
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    recs, rep = load_source(p, tok, DataConfig(max_prompt_len=20))
    assert [r.prompt_id for r in recs] == [0, 2]  # ids stay the source row index
    assert rep.n_too_long == 1 and rep.too_long_ids == [1] and rep.n_loaded == 2
    assert all(len(r.prompt_tokens) <= 20 for r in recs)


def test_builtin_train_eval_differ_and_shuffle_is_stable(tok):
    cfg = DataConfig(train_size=50, eval_size=20)
    train, _ = load_prompts(cfg, tok, "train")
    train2, _ = load_prompts(cfg, tok, "train")
    ev, _ = load_prompts(cfg, tok, "eval")
    assert len(train) == 50 and len(ev) == 20
    assert [r.prompt_id for r in train] == [r.prompt_id for r in train2] != list(range(50))
    assert [r.prompt_text for r in sorted(train, key=lambda r: r.prompt_id)[:20]] != [r.prompt_text for r in ev]
    assert ev[0].extra_info["split"] == "eval"
    unshuffled, _ = load_prompts(DataConfig(train_size=50, shuffle=False), tok, "train")
    assert [r.prompt_id for r in unshuffled] == list(range(50))


def test_unknown_builtin_and_missing_eval(tok):
    with pytest.raises(DataError, match="builtin:chain"):
        load_prompts(DataConfig(train="builtin:nope"), tok)
    with pytest.raises(ValueError, match="data.eval is null"):
        load_prompts(DataConfig(eval=None), tok, "eval")


@pytest.mark.parametrize("kwargs, match", [
    ({"format": "csv"}, "data.format='csv' is not allowed; choose one of: auto, verl, jsonl, trl, disk"),
    ({"on_bad_row": "ignore"}, "data.on_bad_row='ignore' is not allowed; choose one of: error, skip"),
    ({"max_prompt_len": 0}, "data.max_prompt_len must be >= 1"),
    ({"answer_key": ""}, "data.answer_key"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DataConfig(**kwargs)


def test_several_sources_in_mixed_formats(tmp_path, tok):
    """data.train as a list: rows concatenated in order, ids unique across files, counts per file."""
    a = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "add 1 1", "answer": "2"}, {"prompt": "add 1 2", "answer": "3"},
                                           {"prompt": "", "answer": "0"}])  # the blank prompt is a bad row
    b = tmp_path / "b.parquet"
    pq.write_table(pa.Table.from_pylist([verl_row("add 2 2", "4"), verl_row("add 3 3", "6")]), b)
    cfg = DataConfig(train=[a, str(b)], shuffle=False, on_bad_row="skip")
    recs, rep = load_prompts(cfg, tok, "train")
    assert [r.ground_truth for r in recs] == ["2", "3", "4", "6"]
    # b.parquet's rows come after a.jsonl's 3 rows (bad one included): ids 3 and 4
    assert [r.prompt_id for r in recs] == [0, 1, 3, 4]
    assert [r.data_source for r in recs] == ["a", "a", "math", "math"]
    assert (rep.n_rows, rep.n_loaded, rep.n_skipped) == (5, 4, 1)
    assert [(p.source, p.n_rows, p.n_loaded) for p in rep.parts] == [(a, 3, 2), (str(b), 2, 2)]
    lines = rep.summary().splitlines()
    assert lines[0].startswith("2 sources: 4/5 rows loaded, 1 bad row skipped")
    assert "a.jsonl: 2/3 rows loaded" in lines[1] and "b.parquet: 2/2 rows loaded" in lines[2]
    # counts take the noun's plural except for one
    assert lines[1].endswith("1 bad row skipped (empty_prompt=1), 0 prompts too long dropped")
    assert lines[2].endswith("0 bad rows skipped, 0 prompts too long dropped")


def test_source_list_from_config_overrides(tmp_path):
    from ulorl.config import load_run_config

    cfg = load_run_config(None, ["data.train=[x.jsonl,y.parquet]", "data.eval=z.jsonl"])
    assert cfg.data.sources("train") == ["x.jsonl", "y.parquet"] and cfg.data.sources("eval") == ["z.jsonl"]
    assert load_run_config(None, ["data.eval=null"]).data.sources("eval") == []
    cfg = load_run_config(None, ["data.chat_template_kwargs.enable_thinking=false", "data.system_prompt=Be brief."])
    assert cfg.data.chat_template_kwargs == {"enable_thinking": False} and cfg.data.system_prompt == "Be brief."
    with pytest.raises(ValueError, match="data.train"):
        DataConfig(train=["x.jsonl", ""])


def test_system_prompt_added_unless_the_row_has_one(tmp_path, tok):
    rows = [{"prompt": "add 1 2", "answer": "3"},
            {"prompt": [{"role": "system", "content": "own"}, {"role": "user", "content": "add 2 2"}], "answer": "4"}]
    p = write_jsonl(tmp_path / "d.jsonl", rows)
    recs, _ = load_source(p, tok, DataConfig(system_prompt="Reason step by step."))
    assert recs[0].prompt_text == ("<|im_start|>system\nReason step by step.<|im_end|>\n"
                                   "<|im_start|>user\nadd 1 2<|im_end|>\n<|im_start|>assistant\n")
    assert "own" in recs[1].prompt_text and "Reason step by step." not in recs[1].prompt_text


def test_chat_template_kwargs_reach_the_template(tmp_path):
    t = build_tokenizer()
    # a Qwen3-like switch: the template writes an empty think block when enable_thinking is false
    t.chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
                       "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}")
    p = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "add 1 2", "answer": "3"}])
    (on,), _ = load_source(p, t, DataConfig())
    (off,), _ = load_source(p, t, DataConfig(chat_template_kwargs={"enable_thinking": False}))
    assert on.prompt_text == "<user>add 1 2<assistant>"
    assert off.prompt_text == "<user>add 1 2<assistant><think></think>"
    with pytest.raises(ValueError, match="add_generation_prompt"):
        DataConfig(chat_template_kwargs={"add_generation_prompt": False})
