import json
import os

from newsmotion_assets.folder_watch import scan_folder

SUFFIXES = (".mp4",)


def _scan(folder, cursor, **kw):
    return scan_folder(folder, cursor, suffixes=SUFFIXES, max_bytes=kw.pop("max_bytes", 1000), **kw)


def test_file_is_ready_once_stable_and_only_once(tmp_path):
    (tmp_path / "a.mp4").write_bytes(b"x" * 10)
    first = _scan(tmp_path, None)
    assert [e.path.name for e in first.waiting] == ["a.mp4"] and not first.ready
    second = _scan(tmp_path, first.cursor)
    assert [e.path.name for e in second.ready] == ["a.mp4"]
    third = _scan(tmp_path, second.cursor)
    assert not third.ready and not third.waiting and not third.skipped


def test_growing_file_waits(tmp_path):
    path = tmp_path / "a.mp4"
    path.write_bytes(b"x" * 10)
    first = _scan(tmp_path, None)
    path.write_bytes(b"x" * 20)
    second = _scan(tmp_path, first.cursor)
    assert not second.ready and [e.size for e in second.waiting] == [20]
    assert [e.size for e in _scan(tmp_path, second.cursor).ready] == [20]


def test_bad_files_reported_once(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "big.mp4").write_bytes(b"x" * 2000)
    (tmp_path / "Bad Name.mp4").write_bytes(b"x")
    (tmp_path / ".partial.mp4").write_bytes(b"x")
    problem = lambda p: "bad name" if " " in p.name else None  # noqa: E731
    first = _scan(tmp_path, None, name_ok=problem)
    reasons = {e.path.name: why for e, why in first.skipped}
    assert set(reasons) == {"notes.txt", "big.mp4", "Bad Name.mp4"}
    assert "too large" in reasons["big.mp4"] and "not a supported" in reasons["notes.txt"]
    assert not _scan(tmp_path, first.cursor, name_ok=problem).skipped


def test_changed_and_removed_files_are_seen_again(tmp_path):
    path = tmp_path / "a.mp4"
    path.write_bytes(b"x" * 10)
    cursor = _scan(tmp_path, _scan(tmp_path, None).cursor).cursor
    path.write_bytes(b"y" * 12)
    os.utime(path, ns=(1, 1))
    again = _scan(tmp_path, _scan(tmp_path, cursor).cursor)
    assert [e.size for e in again.ready] == [12]
    path.unlink()
    assert json.loads(_scan(tmp_path, again.cursor).cursor)["seen"] == {}


def test_garbage_cursor_and_missing_folder(tmp_path):
    assert not _scan(tmp_path / "nope", "not json").ready


def test_settled_lists_usable_files_until_they_change(tmp_path):
    (tmp_path / "a.mp4").write_bytes(b"x" * 10)
    (tmp_path / "notes.txt").write_text("hi")
    first = _scan(tmp_path, None)
    assert not first.settled  # still waiting
    second = _scan(tmp_path, first.cursor)
    third = _scan(tmp_path, second.cursor)
    assert [e.path.name for e in second.settled] == [e.path.name for e in third.settled] == ["a.mp4"]
    (tmp_path / "a.mp4").write_bytes(b"x" * 12)
    assert not _scan(tmp_path, third.cursor).settled  # changed: waiting again


def test_settled_from_a_cursor_without_the_bad_list(tmp_path):
    (tmp_path / "a.mp4").write_bytes(b"x" * 10)
    (tmp_path / "notes.txt").write_text("hi")
    cursor = json.loads(_scan(tmp_path, _scan(tmp_path, None).cursor).cursor)
    del cursor["bad"]  # as written before settled existed
    assert [e.path.name for e in _scan(tmp_path, json.dumps(cursor)).settled] == ["a.mp4"]
