"""`model.path` as a GGUF file or a package shipping one (ulorl/models/gguf.py): converted once, then reused;
a foreign or damaged file is a one-line error naming it. No real GGUF is needed: the conversion itself
(`convert_gguf`, transformers' GGUF reader) is replaced by a recorder where only the caching is tested; the
real conversion is covered by tests/models/test_real_model.py (opt-in)."""

from __future__ import annotations

import importlib.util
import os

import pytest

from ulorl.cli import main
from ulorl.models import gguf as G
from ulorl.models.loading import resolve_model_path


@pytest.fixture
def fake_convert(monkeypatch):
    """`convert_gguf` replaced by one that writes a marker folder and records its calls."""
    calls = []

    def convert(path, out, dtype="float32"):
        calls.append(path)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_text("")
        return out

    monkeypatch.setattr("ulorl.models.loading.convert_gguf", convert)
    monkeypatch.setattr(G.importlib.util, "find_spec", lambda name: object())  # gguf, accelerate "installed"
    return calls


def test_a_gguf_file_is_converted_once_into_the_cache_and_reused(tmp_path, fake_convert):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 60)
    first = resolve_model_path(str(f))
    assert first.parent == G.cache_root() / "gguf" and first.name.startswith("m-")
    assert resolve_model_path(str(f)) == first and fake_convert == [f]  # second use: the folder as it is
    os.utime(f, ns=(1, 1))  # the file replaced (another modification time): converted again, elsewhere
    assert resolve_model_path(str(f)) != first and len(fake_convert) == 2


def test_a_foreign_file_gets_one_line_naming_it(tmp_path, capsys):
    f = tmp_path / "weights.gguf"
    f.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(G.ModelSourceError, match=f"{f}: not a GGUF file"):
        resolve_model_path(str(f))
    code = main(["train", "-o", str(tmp_path / "run"), "model.warm_start=none", f"model.path={f}", "data.eval=null",
                 "logging.progress=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(f) in err[0] and "not a GGUF file" in err[0], err


def test_a_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(G.ModelSourceError, match="no such GGUF file"):
        resolve_model_path(str(tmp_path / "absent.gguf"))


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("gguf", "accelerate")),
                    reason="needs gguf and accelerate (pip install 'ulorl[real]')")
def test_a_damaged_gguf_file_gets_one_line_naming_it(tmp_path):
    f = tmp_path / "cut.gguf"
    f.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x07" * 40)  # the magic and a version, then garbage
    with pytest.raises(G.ModelSourceError, match=f"{f}: could not be read as a GGUF model") as e:
        resolve_model_path(str(f))
    assert "\n" not in str(e.value)
    assert not list((G.cache_root() / "gguf").glob("cut-*"))  # nothing left to be reused


def test_a_package_name_finds_its_one_gguf_file(tmp_path, monkeypatch):
    class Dist:
        files = ["pkg/__init__.py", "pkg/Model.Q4.gguf"]

        def locate_file(self, rel):
            return tmp_path / rel

    monkeypatch.setattr(G.importlib.metadata, "distribution", lambda name: Dist())
    assert G.gguf_source("some-package") == tmp_path / "pkg/Model.Q4.gguf"
    Dist.files = ["pkg/a.gguf", "pkg/b.gguf"]
    with pytest.raises(G.ModelSourceError, match="ships 2 .gguf files"):
        G.gguf_source("some-package")
