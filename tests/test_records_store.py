"""Writing a record file whole or not at all (workbench/records/store.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.records.store import CorruptRecord, atomic_file, read_json, write_json_atomic


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_write_that_fails_half_way_leaves_the_old_file_and_no_temporary(tmp_path) -> None:
    path = tmp_path / "model.pt"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(path) as f:
        f.write(b"half of the new")
        raise RuntimeError("killed while writing")
    assert path.read_bytes() == b"old"
    assert leftovers(tmp_path) == []
    with atomic_file(path, durable=True) as f:
        f.write(b"new")
    assert path.read_bytes() == b"new" and leftovers(tmp_path) == []


def test_json_is_written_whole_and_a_broken_file_is_named(tmp_path) -> None:
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"status": "succeeded", "when": Path("/x")})
    assert json.loads(path.read_text()) == {"status": "succeeded", "when": "/x"}
    assert read_json(tmp_path / "absent.json") is None
    path.write_text('{"status": ')
    with pytest.raises(CorruptRecord, match="summary.json"):
        read_json(path)


def test_two_runs_that_draw_the_same_name_in_one_second_both_get_a_folder(tmp_path,
                                                                         monkeypatch) -> None:
    """A run id is the second and 4 random hex digits: two runs of one label in one second
    drew the same digits in a suite run (1 in 65,536 a pair), and the second failed with
    "File exists". It draws again."""
    from workbench.records import store

    draws = iter(["80c2", "80c2", "80c2", "5e73"])
    monkeypatch.setattr(store.secrets, "token_hex", lambda n: next(draws))
    monkeypatch.setattr(store.time, "strftime", lambda fmt: "20261205-144615")
    first_id, first = store.new_run_dir(tmp_path / "runs", "check-np2")
    second_id, second = store.new_run_dir(tmp_path / "runs", "check-np2")
    assert first_id == "20261205-144615-check-np2-80c2" and first.is_dir()
    assert second_id == "20261205-144615-check-np2-5e73" and second.is_dir()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted([first_id, second_id])
