"""Reading and writing rows in the three storage layouts: parquet, JSON lines, save_to_disk folders.

Readers return one entry per row: the row as a dict, or a `RowIssue` when the row
cannot even be parsed (invalid JSON, not an object). Invalid UTF-8 bytes in a JSON
line are kept as lone surrogates (`surrogateescape`) so that validation can name the
field that holds them. `save_to_disk` folders are read with pyarrow directly (their
shards are Arrow IPC streams), so `datasets` is not needed at run time. Writers replace an output only once it is
whole (`ulorl.durable.replacing`) and refuse a folder holding what they do not write (`entries_besides`);
`ulorl export` uses both for its model folder.
"""

from __future__ import annotations

import codecs
import fnmatch
import json
import math
import os
from enum import Enum
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ulorl.data.records import DataError, RowIssue
from ulorl.durable import replacing


class Storage(str, Enum):
    PARQUET = "parquet"
    JSONL = "jsonl"
    DISK = "disk"


_SUFFIXES = {".parquet": Storage.PARQUET, ".jsonl": Storage.JSONL, ".ndjson": Storage.JSONL, ".json": Storage.JSONL}
# tables by extension that no reader here takes (a format setting would read them as JSON lines, row by row bad)
_TABLES = {".csv": "CSV", ".tsv": "TSV", ".xlsx": "Excel", ".xls": "Excel"}
# which split of a DatasetDict folder each of our splits reads, in order of preference
_SPLIT_NAMES = {"train": ("train",), "eval": ("test", "validation", "eval", "valid", "dev")}


def detect_storage(path: str | Path, format_hint: str = "set data.format explicitly", output: bool = False) -> Storage:
    """By extension (.parquet, .jsonl/.ndjson/.json) or folder (save_to_disk); `format_hint` says how the
    caller's user names the format instead (a config key, or `--format` for `ulorl clean`). An input that is not
    there is named as such before its name is judged; `output`: `path` is to be written."""
    p = Path(path)
    if p.is_dir():
        return Storage.DISK
    if p.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[p.suffix.lower()]
    if not output and not p.exists():
        raise DataError(f"{path}: no such file or folder")
    if output and p.suffix.lower() in _TABLES:
        raise DataError(f"{path}: {_TABLES[p.suffix.lower()]} is not written; {format_hint}")
    if p.suffix.lower() in _TABLES:  # no format setting reads these: say so, and how to convert
        raise DataError(f"{path}: {_TABLES[p.suffix.lower()]} files are not read; convert it to parquet or JSONL "
                        f"(with pandas: pandas.read_{'excel' if 'x' in p.suffix else 'csv'}({str(path)!r}"
                        f"{', sep=' + repr(chr(9)) if p.suffix.lower() == '.tsv' else ''}).to_parquet('data.parquet'))")
    raise DataError(f"{path}: cannot tell the format from the name; expected a .parquet, .jsonl/.ndjson/.json "
                    f"file or a datasets.save_to_disk folder (or {format_hint})")


SAVE_TO_DISK_FILES = ("data-*.arrow", "dataset_info.json", "state.json")  # what `Dataset.save_to_disk` writes


def output_storage(path: str | Path) -> Storage:
    """The storage of an output path, by its name; an existing folder may only be empty or an earlier save_to_disk
    output (`SAVE_TO_DISK_FILES` only): datasets writes its files among whatever a folder holds."""
    p = Path(path)
    if p.suffix.lower() in _SUFFIXES:
        if p.is_dir():
            raise DataError(f"{path}: is an existing folder, but its name says {_SUFFIXES[p.suffix.lower()].value}; "
                            "give a file name, or a folder name without an extension for save_to_disk")
        return _SUFFIXES[p.suffix.lower()]
    if p.is_dir() and (foreign := entries_besides(p, SAVE_TO_DISK_FILES)):
        raise DataError(f"{path}: an existing folder that is not a save_to_disk dataset (it holds {foreign}); give "
                        "a new or empty folder, or a file name ending .jsonl or .parquet")
    return detect_storage(p, "name the output .jsonl or .parquet", output=True)


def entries_besides(folder: Path, patterns: tuple[str, ...], shown: int = 4) -> str:
    """What `folder` holds besides files named by `patterns` (fnmatch), sorted, folders and links included, as text
    for an error ("notes.txt, runs/ and 3 more"); "" when nothing else. An output folder that a writer replaces
    or fills may hold only what that writer writes."""
    names = sorted(e.name + ("/" if e.is_dir() else "") for e in folder.iterdir()
                   if e.is_dir() or e.is_symlink() or not any(fnmatch.fnmatch(e.name, g) for g in patterns))
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


MAX_LINE_BYTES = 64 * 2**20  # a JSONL line longer than this is a bad row, not a prompt


def check_regular_file(path: str | Path) -> None:
    """DataError unless `path` is a regular file (symlinks followed): a FIFO would block `open` forever and a
    device such as /dev/zero would read until memory runs out."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise DataError(f"{path}: no such file or folder") from None
    if not stat.S_ISREG(mode):
        kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or
                stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise DataError(f"{path}: is {kind}; give a regular data file")


def check_readable(path: str | Path, storage: Storage) -> None:
    """DataError unless `path` exists as `storage` reads it: a folder for a save_to_disk dataset, else a regular
    file. Cheap: run before work that would be lost to a missing file (a warm start)."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{path}: no such file or folder")
    if storage is not Storage.DISK and p.is_dir():
        raise DataError(f"{path}: is a folder, but the format given reads a {storage.value} file; give the file, "
                        "or format disk for a datasets.save_to_disk folder")
    if storage is not Storage.DISK:
        check_regular_file(p)


def read_rows(path: str | Path, storage: Storage, split: str = "train") -> list[dict | RowIssue]:
    """All rows of a source, in file order (the index is the row's stable id)."""
    check_readable(path, storage)
    p = Path(path)
    if storage is Storage.DISK:
        return _read_disk(p, split)
    return _read_parquet(p) if storage is Storage.PARQUET else _read_jsonl(p)


def _read_jsonl(path: Path) -> list[dict | RowIssue]:
    raw = path.read_bytes().removeprefix(codecs.BOM_UTF8)  # a UTF-8 byte-order mark, as Windows tools write one
    if path.suffix.lower() == ".json" and raw.lstrip()[:1] == b"[":  # a JSON array, not JSON lines
        try:
            items = json.loads(raw.decode("utf-8", errors="surrogateescape"))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: invalid JSON array: {e}") from e
        except RecursionError:
            raise DataError(f"{path}: JSON nested too deeply to read") from None
        return [_as_object(x, i) for i, x in enumerate(items)]
    rows: list[dict | RowIssue] = []
    for line_no, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        i = len(rows)
        if len(line) > MAX_LINE_BYTES:
            rows.append(RowIssue(i, "<row>", "line_too_long", f"a line of at most {MAX_LINE_BYTES} bytes (line "
                                 f"{line_no})", f"{len(line)} bytes"))
            continue
        try:
            obj = json.loads(line.decode("utf-8", errors="surrogateescape"))
        except json.JSONDecodeError as e:
            rows.append(RowIssue(i, "<row>", "invalid_json", f"one JSON object per line (line {line_no})", str(e)))
            continue
        except RecursionError:
            rows.append(RowIssue(i, "<row>", "invalid_json", f"one JSON object per line (line {line_no})",
                                 "JSON nested too deeply to read"))
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


def _json_field(path: Path, key: str, kind: type) -> object:
    """`key` of the JSON object in file `path`, of type `kind`, or a DataError naming the file."""
    check_regular_file(path)
    try:
        value = json.loads(path.read_bytes())[key]
        if not isinstance(value, kind):
            raise TypeError(f"'{key}' is a {type(value).__name__}")
        return value
    except (ValueError, RecursionError, KeyError, TypeError, IndexError) as e:
        raise DataError(f"{path}: not a valid datasets metadata file (need a JSON object with a {kind.__name__} "
                        f"'{key}'): {type(e).__name__}: {e}") from None


def disk_splits(path: str | Path, split: str) -> tuple[str, list[str]] | None:
    """For a `save_to_disk` DatasetDict folder: the split read for `split` (its `_SPLIT_NAMES`) and the others it
    holds; None for any other source."""
    dd = Path(path) / "dataset_dict.json"
    if not dd.exists():
        return None
    splits = _json_field(dd, "splits", list)
    wanted = _SPLIT_NAMES.get(split, (split,))
    chosen = next((s for s in wanted if s in splits), splits[0] if len(splits) == 1 else None)
    if chosen is None:
        raise DataError(f"{path}: DatasetDict has splits {splits}, none of {list(wanted)} for the {split} split")
    return chosen, [s for s in splits if s != chosen]


def _read_disk(path: Path, split: str) -> list[dict | RowIssue]:
    if (chosen := disk_splits(path, split)) is not None:  # a DatasetDict: its split
        path = path / chosen[0]
    state = path / "state.json"
    if not state.exists():
        raise DataError(f"{path}: not a datasets.save_to_disk folder (no state.json or dataset_dict.json)")
    entries = _json_field(state, "_data_files", list)
    if not all(isinstance(f, dict) and isinstance(f.get("filename"), str) for f in entries):
        raise DataError(f"{state}: every '_data_files' entry needs a 'filename'")
    files = [path / f["filename"] for f in entries]
    if not all(f.resolve().parent == path.resolve() for f in files):
        raise DataError(f"{state}: a '_data_files' entry names a file outside {path}")
    for f in files:
        check_regular_file(f)
    try:
        tables = []
        for f in files:
            with pa.memory_map(str(f)) as src:
                tables.append(pa.ipc.open_stream(src).read_all())
        return pa.concat_tables(tables).to_pylist() if tables else []
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: cannot read the Arrow shards: {e}") from e


def write_rows(rows: list[dict], path: str | Path, storage: Storage) -> None:
    """Write rows in the given storage (parent folders created). The rows go to a temporary name beside `path`,
    which replaces `path` only once they are all written (`durable.replacing`): a crash or a full disk leaves an
    earlier output, or the input when it is the output, as it was. A link is followed: its target is replaced, the
    link kept."""
    p = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with replacing(p, named=path) as tmp:
        if storage is Storage.JSONL:
            with open(tmp, "w", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps(_jsonable(r), ensure_ascii=False, allow_nan=False, default=str) + "\n")
        elif storage is Storage.PARQUET:
            pq.write_table(_table(rows), tmp)
        else:
            try:
                import datasets
            except ImportError as e:
                raise DataError(f"{path}: writing a save_to_disk folder needs `datasets`; "
                                f"name the output .jsonl or .parquet instead") from e
            datasets.Dataset.from_list(rows).save_to_disk(str(tmp))


def _table(rows: list[dict]) -> pa.Table:
    """Rows as a table with every column any row has (`from_pylist` keeps only the first row's keys),
    in order of first appearance; a row without a column holds null there."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return pa.Table.from_pydict({c: [r.get(c) for r in rows] for c in columns})


def _jsonable(value: object) -> object:
    """A value JSON can hold: NaN/inf (not JSON) become null, bytes (parquet binary columns) text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
