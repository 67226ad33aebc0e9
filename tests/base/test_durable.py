"""The one atomic write (base.durable): a reader sees the old file or the new one,
never half of one, and a failed write leaves no temporary file behind."""

import json
import os

import pytest

from base import durable


def test_write_replaces_whole_and_leaves_nothing_else(tmp_path):
    target = tmp_path / "deep" / "er" / "note.md"
    durable.write_atomic(target, "first")
    durable.write_atomic(target, "second ✓")
    assert target.read_text(encoding="utf-8") == "second ✓"
    assert os.listdir(target.parent) == ["note.md"]
    durable.write_json(tmp_path / "r.json", {"a": 1}, default=str)
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": 1}


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "result.json"
    durable.write_atomic(target, b"old")

    class Unwritable:
        pass

    with pytest.raises(TypeError):
        durable.write_json(target, {"x": Unwritable()})  # fails while writing the temp file
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["result.json"]


def test_a_private_file_and_the_folder_made_for_it_are_this_users_only(tmp_path):
    target = tmp_path / "state" / "outbox" / "capture.json"
    durable.write_private(target, "token-bearing")
    assert target.read_text() == "token-bearing"
    assert target.stat().st_mode & 0o777 == 0o600
    assert target.parent.stat().st_mode & 0o777 == 0o700
