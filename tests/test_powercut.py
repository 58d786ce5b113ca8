"""The power-cut double itself (tests/powercut.py): what survives, case by case."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from powercut import PowerCut, Sync, read_tree


def write(path: Path, data: bytes, *, sync: bool = False) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    return root


@pytest.fixture
def pc(root: Path, monkeypatch: pytest.MonkeyPatch) -> PowerCut:
    return PowerCut(root).install(monkeypatch)


# 1. Written and closed, never synced.


def test_unsynced_file_without_dir_sync_is_gone(root: Path, pc: PowerCut) -> None:
    write(root / "a", b"data")
    pc.cut()
    assert read_tree(root) == {}
    assert pc.log == []


def test_unsynced_file_under_synced_dir_is_empty(root: Path, pc: PowerCut) -> None:
    write(root / "a", b"data")
    sync_dir(root)
    pc.cut()
    assert read_tree(root) == {"a": b""}
    assert pc.synced_dirs == ["."] and pc.synced_files == []


# 2. and 3. Synced file, with and without its directory synced.


def test_synced_file_and_dir_survive_whole(root: Path, pc: PowerCut) -> None:
    write(root / "a", b"data", sync=True)
    sync_dir(root)
    pc.cut()
    assert read_tree(root) == {"a": b"data"}
    assert pc.log == [Sync("file", "a"), Sync("dir", ".")]


@pytest.mark.parametrize("sync", [os.fsync, os.fdatasync], ids=["fsync", "fdatasync"])
def test_synced_file_without_dir_sync_is_gone(root: Path, monkeypatch, sync) -> None:
    pc = PowerCut(root).install(monkeypatch)
    with open(root / "a", "wb") as fh:
        fh.write(b"data")
        fh.flush()
        getattr(os, sync.__name__)(fh.fileno())  # the patched one
    assert pc.synced_files == ["a"]
    pc.cut()
    assert read_tree(root) == {}


def test_dir_synced_before_the_file_was_created_does_not_keep_it(root: Path, pc: PowerCut) -> None:
    sync_dir(root)
    write(root / "a", b"data", sync=True)
    pc.cut()
    assert read_tree(root) == {}


# 4. Temporary file renamed over a synced name.


@pytest.mark.parametrize(
    ("dir_sync", "expected"), [(False, b"old"), (True, b"new")], ids=["no-dir-sync", "dir-sync"]
)
def test_rename_over_synced_name(root: Path, pc: PowerCut, dir_sync: bool, expected) -> None:
    write(root / "name", b"old", sync=True)
    sync_dir(root)
    write(root / "tmp", b"new", sync=True)
    os.rename(root / "tmp", root / "name")
    if dir_sync:
        sync_dir(root)
    pc.cut()
    assert read_tree(root) == {"name": expected}


def test_rename_of_unsynced_file_over_synced_name(root: Path, pc: PowerCut) -> None:
    """The classic bug: rename without fsync of the data, dir synced: empty file."""
    write(root / "name", b"old", sync=True)
    sync_dir(root)
    write(root / "tmp", b"new")
    os.rename(root / "tmp", root / "name")
    sync_dir(root)
    pc.cut()
    assert read_tree(root) == {"name": b""}


# 5. Hard link into place, then the temporary name removed.


def test_link_then_unlink_without_dir_sync(root: Path, pc: PowerCut) -> None:
    write(root / "tmp", b"data", sync=True)
    os.link(root / "tmp", root / "name")
    sync_dir(root)
    os.unlink(root / "tmp")
    pc.cut()
    # The last synced listing has both names for the one inode: both come back, linked.
    assert read_tree(root) == {"name": b"data", "tmp": b"data"}
    assert os.path.samefile(root / "name", root / "tmp")


def test_link_then_unlink_with_dir_sync(root: Path, pc: PowerCut) -> None:
    write(root / "tmp", b"data", sync=True)
    os.link(root / "tmp", root / "name")
    sync_dir(root)
    os.unlink(root / "tmp")
    sync_dir(root)
    pc.cut()
    assert read_tree(root) == {"name": b"data"}


def test_unlinked_inode_keeps_its_number(root: Path, pc: PowerCut) -> None:
    """A name removed without a dir sync comes back with its own bytes, even when
    new files are created meanwhile (ext4 would reuse a freed inode number at once;
    the double pins the inode so that the number cannot name another file)."""
    write(root / "a", b"a-bytes", sync=True)
    sync_dir(root)
    os.unlink(root / "a")
    for i in range(20):
        write(root / f"n{i}", b"other", sync=True)
    pc.cut()
    assert read_tree(root) == {"a": b"a-bytes"}


# 6. The baseline.


def test_baseline(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "d").mkdir()
    for name in ("kept", "rewritten", "rewritten-synced", "appended", "removed"):
        write(root / name, name.encode())
    write(root / "d" / "inner", b"inner")
    (root / "empty-dir").mkdir()
    pc = PowerCut(root).install(monkeypatch)

    write(root / "rewritten", b"new bytes")  # O_TRUNC rewrite, not synced
    write(root / "rewritten-synced", b"new synced", sync=True)
    with open(root / "appended", "ab") as fh:
        fh.write(b" more")
    os.unlink(root / "removed")  # no dir sync: comes back
    os.unlink(root / "d" / "inner")
    sync_dir(root / "d")  # dir sync: gone for good
    pc.cut()
    assert read_tree(root) == {
        "kept": b"kept",
        "rewritten": b"",
        "rewritten-synced": b"new synced",
        "appended": b"",
        "removed": b"removed",
        "d": None,
        "empty-dir": None,
    }


def test_content_is_the_bytes_at_the_last_sync(root: Path, pc: PowerCut) -> None:
    with open(root / "a", "wb") as fh:
        fh.write(b"one")
        fh.flush()
        os.fsync(fh.fileno())
        fh.write(b" two")
        fh.flush()
        os.fsync(fh.fileno())
    with open(root / "b", "wb") as fh:
        fh.write(b"one")
        fh.flush()
        os.fsync(fh.fileno())
        fh.write(b" two")  # changed after its sync: the worst case is empty
    sync_dir(root)
    pc.cut()
    assert read_tree(root) == {"a": b"one two", "b": b""}


# 7. New directories.


@pytest.mark.parametrize(
    ("synced", "expected"),
    [
        (["new/sub1", "new/sub2"], {}),
        (["new/sub1", "new/sub2", "new"], {}),
        (["new", "."], {"new": None, "new/sub1": None, "new/sub2": None}),
        (
            ["new/sub1", "new", "."],
            {"new": None, "new/sub1": None, "new/sub1/f": b"f", "new/sub2": None},
        ),
        (
            ["new/sub1", "new/sub2", "new", "."],
            {
                "new": None,
                "new/sub1": None,
                "new/sub1/f": b"f",
                "new/sub2": None,
                "new/sub2/g": b"g",
            },
        ),
    ],
    ids=["leaves", "leaves+new", "new+root", "sub1+new+root", "all"],
)
def test_new_tree_needs_every_parent_synced(
    root: Path, pc: PowerCut, synced: list[str], expected: dict[str, bytes | None]
) -> None:
    (root / "new" / "sub1").mkdir(parents=True)
    (root / "new" / "sub2").mkdir()
    write(root / "new" / "sub1" / "f", b"f", sync=True)
    write(root / "new" / "sub2" / "g", b"g", sync=True)
    for rel in synced:
        sync_dir(root / rel)
    pc.cut()
    assert read_tree(root) == expected
    assert pc.synced_dirs == synced


def test_directory_moved_between_unsynced_and_synced_parent(root: Path, monkeypatch) -> None:
    """Under two durable names a directory is rebuilt at the first (breadth-first, sorted)."""
    (root / "a" / "sub").mkdir(parents=True)
    (root / "b").mkdir()
    pc = PowerCut(root).install(monkeypatch)
    os.rename(root / "a" / "sub", root / "b" / "sub")
    sync_dir(root / "b")
    pc.cut()
    assert read_tree(root) == {"a": None, "a/sub": None, "b": None}


# The wrappers themselves.


def test_write_only_descriptor_and_file_object(root: Path, pc: PowerCut) -> None:
    fd = os.open(root / "w", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"write-only")
        os.fsync(fd)
    finally:
        os.close(fd)
    with open(root / "f", "wb") as fh:
        fh.write(b"file object")
        fh.flush()
        os.fsync(fh)  # anything with fileno(), as os.fsync accepts
    sync_dir(root)
    pc.cut()
    assert read_tree(root) == {"f": b"file object", "w": b"write-only"}
    assert pc.synced_files == ["w", "f"]


def test_real_sync_still_runs_and_outside_root_is_ignored(
    tmp_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    pc = PowerCut(root).install(monkeypatch)
    write(tmp_path / "outside", b"x", sync=True)
    sync_dir(tmp_path)
    write(root / "inside", b"y", sync=True)
    assert len(calls) == 3
    assert pc.log == [Sync("file", "inside")]


def test_failed_sync_raises_and_records_nothing(root: Path, pc: PowerCut) -> None:
    fd = os.open(root, os.O_RDONLY)
    os.close(fd)
    with pytest.raises(OSError):
        os.fsync(fd)
    assert pc.log == []


def test_file_moved_out_of_the_root_is_still_tracked(
    tmp_path: Path, root: Path, pc: PowerCut
) -> None:
    write(root / "a", b"old", sync=True)
    sync_dir(root)
    os.rename(root / "a", tmp_path / "moved")
    with open(tmp_path / "moved", "wb") as fh:
        fh.write(b"new")
        fh.flush()
        os.fsync(fh.fileno())
    pc.cut()
    # root was not synced after the move: "a" is back, naming the inode now synced with "new".
    assert read_tree(root) == {"a": b"new"}
    assert pc.log[-1] == Sync("file", str(tmp_path / "moved"))


def test_second_cut_starts_from_the_survivors(root: Path, pc: PowerCut) -> None:
    write(root / "a", b"a", sync=True)
    sync_dir(root)
    write(root / "lost", b"lost")
    pc.cut()
    assert read_tree(root) == {"a": b"a"}
    write(root / "b", b"b", sync=True)
    sync_dir(root)
    write(root / "a", b"rewritten")
    pc.cut()
    assert read_tree(root) == {"a": b"", "b": b"b"}


def test_symlink_is_refused(root: Path, pc: PowerCut) -> None:
    os.symlink("target", root / "link")
    with pytest.raises(NotImplementedError, match="link"):
        sync_dir(root)


def test_close_stops_recording(root: Path, pc: PowerCut) -> None:
    pc.close()
    write(root / "a", b"a", sync=True)
    assert pc.log == []
    with pytest.raises(RuntimeError):
        pc.cut()
