"""Issue 15: hostile rows for loading and `ulorl clean` (columns, NaN/inf/NUL, writing back).

Every bad row is refused like any other: named by file, row and field, counted by reason with
`--on-bad-row skip`; what `clean` writes is valid JSON / keeps every column.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ulorl.cli import main as cli
from ulorl.data.formats import Storage, read_rows, write_rows
from ulorl.data.records import RowIssue
from ulorl.data.validate import RowSchema, validate_row

FLAT = RowSchema()


def clean(tmp: Path, lines: list[str], out: str, *extra: str) -> tuple[int, dict]:
    src = tmp / "in.jsonl"
    src.write_text("".join(line + "\n" for line in lines))
    rc = cli(["clean", "--input", str(src), "--output", str(tmp / out), "--steps", "short_answer", *extra])
    report = tmp / f"{out}.report.json"
    return rc, json.loads(report.read_text()) if report.exists() else {}


# -- 2. parquet keeps columns the first row lacks ----------------------------------------------------------
def test_clean_to_parquet_keeps_columns_absent_from_row_0(tmp_path):
    rc, report = clean(tmp_path, ['{"prompt": "What is 1+1?", "answer": "2"}',
                                  '{"prompt": "What is 2+3?", "answer": "5", "extra_info": {"q": 1}, "level": 3}'],
                       "out.parquet")
    assert rc == 0
    rows = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert rows[1]["extra_info"] == {"q": 1} and rows[1]["level"] == 3
    assert rows[0]["level"] is None and rows[0]["extra_info"] is None
    assert report["validation"]["n_loaded"] == 2  # was always 0


# -- 9. NaN, Infinity and NUL are bad rows ---------------------------------------------------------------------
HOSTILE_ANSWERS = {
    "NaN": ('{"prompt": "q?", "answer": NaN}', "answer", "non_finite"),
    "Infinity": ('{"prompt": "q?", "answer": Infinity}', "answer", "non_finite"),
    "-Infinity": ('{"prompt": "q?", "answer": -Infinity}', "answer", "non_finite"),
    "NUL in the answer": ('{"prompt": "q?", "answer": "4\\u0000"}', "answer", "nul_character"),
    "NUL in the prompt": ('{"prompt": "What\\u0000 is 2+2?", "answer": "4"}', "prompt", "nul_character"),
    "NUL in a message": ('{"prompt": [{"role": "user", "content": "q\\u0000"}], "answer": "4"}', "prompt[0].content",
                         "nul_character"),
}


@pytest.mark.parametrize("case", list(HOSTILE_ANSWERS))
def test_nan_inf_and_nul_are_bad_rows(case, tmp_path):
    line, field, reason = HOSTILE_ANSWERS[case]
    (tmp_path / "d.jsonl").write_text(line + "\n")
    (row,) = read_rows(tmp_path / "d.jsonl", Storage.JSONL)
    issue = validate_row(row, 0, FLAT, "d")
    assert isinstance(issue, RowIssue) and issue.field == field and issue.reason == reason
    assert f"field '{field}'" in issue.message("d.jsonl")


def test_a_nan_answer_never_reaches_training_or_the_output(tmp_path, capsys):
    lines = ['{"prompt": "q1?", "answer": NaN}', '{"prompt": "q2?", "answer": "4"}',
             '{"prompt": "q3?", "answer": "7", "score": NaN, "w": Infinity}']
    rc, report = clean(tmp_path, lines, "out.jsonl", "--on-bad-row", "skip")
    assert rc == 0
    assert report["validation"]["skipped_by_reason"] == {"non_finite": 1}
    out = (tmp_path / "out.jsonl").read_text().splitlines()
    assert "NaN" not in "".join(out) and "Infinity" not in "".join(out)
    rows = [json.loads(x) for x in out]  # strict JSON: a NaN in another column is written as null
    assert rows == [{"prompt": "q2?", "answer": "4"}, {"prompt": "q3?", "answer": "7", "score": None, "w": None}]
    capsys.readouterr()
    rc, _ = clean(tmp_path, lines[:1], "strict.jsonl")  # on_bad_row=error: named, exit 2
    assert rc == 2 and "row 0, field 'answer'" in capsys.readouterr().err


@pytest.mark.parametrize("storage", [Storage.JSONL, Storage.PARQUET, Storage.DISK])
def test_a_write_that_fails_leaves_the_earlier_output_whole(tmp_path, monkeypatch, storage):
    """`ulorl clean --input X --output X` reads X, then writes X: a write that fails half-way (a full disk, a
    crash) must leave X as it was, with no leftover beside it; a write that completes replaces it."""
    if storage is Storage.DISK:
        pytest.importorskip("datasets")
    out = tmp_path / {Storage.JSONL: "x.jsonl", Storage.PARQUET: "x.parquet", Storage.DISK: "x"}[storage]
    before = [{"prompt": f"q{i}", "answer": str(i)} for i in range(5)]
    write_rows(before, out, storage)

    def read():
        return [r for r in read_rows(out, storage) if not isinstance(r, RowIssue)]

    assert read() == before
    import ulorl.data.formats as formats

    real, seen = formats._jsonable, []

    def full_disk_at_row_3(value):
        seen.append(value)
        if len(seen) == 3:
            raise OSError(28, "No space left on device")
        return real(value)

    def half_written(*args, **kwargs):  # the writer's first bytes land, then the disk is full
        path = Path(kwargs.get("where") or next(a for a in args if isinstance(a, (str, Path))))
        if storage is Storage.DISK:
            path.mkdir()
            path = path / "data-00000-of-00001.arrow"
        path.write_bytes(b"torn")
        raise OSError(28, "No space left on device")

    if storage is Storage.JSONL:
        monkeypatch.setattr(formats, "_jsonable", full_disk_at_row_3)
    elif storage is Storage.PARQUET:
        monkeypatch.setattr(formats.pq, "write_table", half_written)
    else:
        import datasets

        monkeypatch.setattr(datasets.Dataset, "save_to_disk", half_written)
    with pytest.raises(OSError, match="No space left") as raised:
        write_rows([{"prompt": "new", "answer": "9"}] * 4, out, storage)
    assert raised.value.filename == str(out)  # the output asked for, not its temporary name (or none)
    monkeypatch.undo()
    assert read() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    write_rows(before[:2], out, storage)
    assert read() == before[:2] and sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    link = tmp_path / f"link-{out.name}"  # an output named through a link: the target replaced, the link kept
    link.symlink_to(out)
    write_rows(before[:1], link, storage)
    assert link.is_symlink() and read() == before[:1]


def test_write_rows_jsonl_is_strict_json(tmp_path):
    write_rows([{"a": math.nan, "b": [math.inf, 1.0], "c": b"bytes"}], tmp_path / "o.jsonl", Storage.JSONL)
    text = (tmp_path / "o.jsonl").read_text()
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} written")) == {
        "a": None, "b": [None, 1.0], "c": "bytes"}


def test_a_dataset_dicts_other_splits_are_named_not_dropped_in_silence(tmp_path, capsys):
    """`ulorl clean` cleans one split of a save_to_disk DatasetDict (train); the others were dropped without a word.
    It now says which it left and how to clean one: give the split's own folder."""
    datasets = pytest.importorskip("datasets")
    rows = {"train": [{"prompt": f"q{i}", "answer": str(i)} for i in range(3)],
            "test": [{"prompt": "t", "answer": "7"}, {"prompt": "u", "answer": "8"}]}
    datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in rows.items()}).save_to_disk(tmp_path / "dd")
    assert cli(["clean", "--input", str(tmp_path / "dd"), "-o", str(tmp_path / "out")]) == 0
    assert (f"note: {tmp_path / 'dd'} is a DatasetDict; its 'train' split is cleaned, not test (give "
            f"{tmp_path / 'dd' / 'test'} as --input to clean that one)") in capsys.readouterr().out
    assert cli(["clean", "--input", str(tmp_path / "dd" / "test"), "-o", str(tmp_path / "test.jsonl")]) == 0
    assert [json.loads(line)["answer"] for line in (tmp_path / "test.jsonl").read_text().splitlines()] == ["7", "8"]
