"""atomic_write_text: the file is replaced whole or kept, and an error names the file asked for."""

import errno
import os

import pytest

from ulorl.durable import atomic_write_text, raise_naming


def test_it_replaces_the_file_whole_and_leaves_nothing_beside_it(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


@pytest.mark.parametrize("case", ["a folder", "under a file", "under a missing folder"])
def test_an_error_names_the_file_asked_for_not_its_temporary_name(case, tmp_path):
    (tmp_path / "afile").write_text("kept")
    target, error = {"a folder": (tmp_path, IsADirectoryError),
                     "under a file": (tmp_path / "afile" / "report.json", NotADirectoryError),
                     "under a missing folder": (tmp_path / "missing" / "report.json", FileNotFoundError)}[case]
    with pytest.raises(error) as raised:
        atomic_write_text(target, "new")
    assert raised.value.filename == str(target)  # the unlink of the unwritten temporary file raised its own before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"] and (tmp_path / "afile").read_text() == "kept"


def test_a_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    target.write_text("old")

    def full(fd):  # a write past a full disk raises an error that names no file
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as raised:
        atomic_write_text(target, "new")
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(target)
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"] and target.read_text() == "old"


def test_raise_naming_maps_the_temporary_name_to_the_one_asked_for(tmp_path):
    out, tmp = tmp_path / "export", tmp_path / "export.tmp-7"
    cases = [(OSError(errno.ENOSPC, "full"), str(out)),  # no file named: the output
             (FileNotFoundError(errno.ENOENT, "gone", str(tmp)), str(out)),
             (OSError(errno.ENOSPC, "full", str(tmp / "sub" / "a.bin")), str(out / "sub" / "a.bin")),
             (PermissionError(errno.EACCES, "no", str(tmp_path / "export.tmp-70")), str(tmp_path / "export.tmp-70")),
             (OSError(errno.EIO, "io", "/elsewhere/file"), "/elsewhere/file")]  # not ours: as it was
    for error, named in cases:
        with pytest.raises(type(error)) as raised:
            raise_naming(error, out, tmp)
        assert raised.value.filename == named and raised.value.errno == error.errno
