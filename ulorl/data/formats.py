"""Reading and writing rows in the three storage layouts: parquet, JSON lines, save_to_disk folders.

Readers return one entry per row: the row as a dict, or a `RowIssue` when the row
cannot even be parsed (invalid JSON, not an object). Invalid UTF-8 bytes in a JSON
line are kept as lone surrogates (`surrogateescape`) so that validation can name the
field that holds them. `save_to_disk` folders are read with pyarrow directly (their
shards are Arrow IPC streams), so `datasets` is not needed at run time.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ulorl.data.records import DataError, RowIssue


class Storage(str, Enum):
    PARQUET = "parquet"
    JSONL = "jsonl"
    DISK = "disk"


_SUFFIXES = {".parquet": Storage.PARQUET, ".jsonl": Storage.JSONL, ".ndjson": Storage.JSONL, ".json": Storage.JSONL}
# which split of a DatasetDict folder each of our splits reads, in order of preference
_SPLIT_NAMES = {"train": ("train",), "eval": ("test", "validation", "eval", "valid", "dev")}


def detect_storage(path: str | Path) -> Storage:
    """By extension (.parquet, .jsonl/.ndjson/.json) or folder (save_to_disk)."""
    p = Path(path)
    if p.is_dir():
        return Storage.DISK
    if p.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[p.suffix.lower()]
    raise DataError(f"{path}: cannot tell the format from the name; expected a .parquet, .jsonl/.ndjson/.json "
                    f"file or a datasets.save_to_disk folder (or set data.format explicitly)")


def read_rows(path: str | Path, storage: Storage, split: str = "train") -> list[dict | RowIssue]:
    """All rows of a source, in file order (the index is the row's stable id)."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{path}: no such file or folder")
    if storage is Storage.DISK:
        return _read_disk(p, split)
    return _read_parquet(p) if storage is Storage.PARQUET else _read_jsonl(p)


def _read_jsonl(path: Path) -> list[dict | RowIssue]:
    raw = path.read_bytes()
    if path.suffix.lower() == ".json" and raw.lstrip()[:1] == b"[":  # a JSON array, not JSON lines
        try:
            items = json.loads(raw.decode("utf-8", errors="surrogateescape"))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: invalid JSON array: {e}") from e
        return [_as_object(x, i) for i, x in enumerate(items)]
    rows: list[dict | RowIssue] = []
    for line_no, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        i = len(rows)
        try:
            obj = json.loads(line.decode("utf-8", errors="surrogateescape"))
        except json.JSONDecodeError as e:
            rows.append(RowIssue(i, "<row>", "invalid_json", f"one JSON object per line (line {line_no})", str(e)))
            continue
        rows.append(_as_object(obj, i))
    return rows


def _as_object(obj: object, i: int) -> dict | RowIssue:
    if isinstance(obj, dict):
        return obj
    return RowIssue(i, "<row>", "wrong_type", "a JSON object", type(obj).__name__)


def _read_parquet(path: Path) -> list[dict | RowIssue]:
    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: cannot read as parquet: {e}") from e


def _read_disk(path: Path, split: str) -> list[dict | RowIssue]:
    dd = path / "dataset_dict.json"
    if dd.exists():  # a DatasetDict: pick the split
        splits = json.loads(dd.read_text())["splits"]
        wanted = _SPLIT_NAMES.get(split, (split,))
        chosen = next((s for s in wanted if s in splits), splits[0] if len(splits) == 1 else None)
        if chosen is None:
            raise DataError(f"{path}: DatasetDict has splits {splits}, none of {list(wanted)} for the {split} split")
        path = path / chosen
    state = path / "state.json"
    if not state.exists():
        raise DataError(f"{path}: not a datasets.save_to_disk folder (no state.json or dataset_dict.json)")
    files = [path / f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    try:
        tables = []
        for f in files:
            with pa.memory_map(str(f)) as src:
                tables.append(pa.ipc.open_stream(src).read_all())
        return pa.concat_tables(tables).to_pylist() if tables else []
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: cannot read the Arrow shards: {e}") from e


def write_rows(rows: list[dict], path: str | Path, storage: Storage) -> None:
    """Write rows in the given storage (parent folders created)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if storage is Storage.JSONL:
        with open(p, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    elif storage is Storage.PARQUET:
        pq.write_table(pa.Table.from_pylist(rows), p)
    else:
        try:
            import datasets
        except ImportError as e:
            raise DataError(f"{path}: writing a save_to_disk folder needs `datasets`; "
                            f"name the output .jsonl or .parquet instead") from e
        datasets.Dataset.from_list(rows).save_to_disk(str(p))
