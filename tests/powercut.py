"""A test double of a local file system that loses power: only what was fsynced survives.

Tests of commit code use it to prove that data is synced before it is published::

    cut = PowerCut(tmp_path).install(monkeypatch)
    commit(tmp_path / "out")          # the code under test, calling os.fsync
    cut.cut()                         # power loss: tmp_path now holds what survived
    assert read_tree(tmp_path) == ...

The model is the worst case that POSIX ``fsync`` semantics allow a local file
system to leave after a power cut (ext4 with delayed allocation comes close to it):

* **Baseline.** Everything under ``root`` when :meth:`PowerCut.install` runs is
  durable: the tree's names and each file's bytes.
* **File content** is durable as of the last ``os.fsync`` / ``os.fdatasync`` on any
  descriptor of the file's inode (the model keys inodes by ``(st_dev, st_ino)``, so
  it follows renames and hard links); the bytes are read at the moment of the sync.
  After the cut a file gets its durable bytes if its current bytes still equal
  them; if it was changed after its last sync (or since the baseline) it is
  **empty**, the worst a real disk can leave after an ``O_TRUNC`` rewrite; a file
  never synced is empty too (delayed allocation's typical zero-length file).
* **Directory entries** (name -> inode, files and subdirectories) are durable as of
  the last fsync of the directory itself (``os.open(dir, os.O_RDONLY)`` then
  ``os.fsync(fd)``). The Linux fsync(2) man page: "Calling fsync() does not
  necessarily ensure that the entry in the directory containing the file has also
  reached disk.  For that an explicit fsync() on a file descriptor for the
  directory is also needed."  A directory never fsynced since the install keeps its
  baseline entries, or has none if it was created after the install.
* **After the cut** the tree is rebuilt from the durable state only, from ``root``
  down: each durable entry of a durable directory is a file with the content above
  or a directory that recurses. So a name created or renamed in without a later
  fsync of its directory disappears, and a name removed or renamed away without one
  comes back, naming the inode it named then (whose synced bytes the model keeps).
  An inode under several durable names is rebuilt as hard links. A directory under
  two durable names (moved between directories and only one of them synced) is
  rebuilt under the first in breadth-first, name-sorted order only.

Each inode the model refers to is pinned with an ``O_PATH`` descriptor until the
next cut (or :meth:`PowerCut.close`): an unlinked inode's number cannot be reused
for a new file while it is pinned (ext4 reuses freed numbers at once), and its
current bytes can still be read through ``/proc/self/fd``.

Limits: Linux only (``/proc/self/fd``, ``O_PATH``); regular files and directories
only (a symlink, FIFO or socket under ``root`` raises :class:`NotImplementedError`
when listed); only this process's calls through the ``os`` module are seen (not a
child process, not the JVM, not a ``from os import fsync`` bound before the
install); file modes, owners and times are not modelled. Reading a write-only
descriptor's bytes opens and closes a second descriptor on the inode, which (as
any close does) releases this process's ``fcntl`` record locks on that file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import resource
import shutil
import stat
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import pytest

Inode = tuple[int, int]
"""``(st_dev, st_ino)``."""


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


@dataclass(frozen=True)
class Sync:
    """One recorded ``os.fsync`` / ``os.fdatasync`` under the root."""

    kind: Literal["file", "dir"]
    path: str
    """Relative to the root (``"."`` for the root itself) with ``/`` separators; the
    absolute path when the inode has since moved out of the root."""


class PowerCut:
    """The durable state of the tree under ``root``; :meth:`cut` leaves only that."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.realpath(root)
        self.log: list[Sync] = []
        """Every sync recorded under the root, in order (kept across cuts)."""
        self._root: Inode | None = None  # None: not installed, or closed
        self._content: dict[Inode, bytes] = {}  # durable bytes of a file inode
        self._entries: dict[Inode, dict[str, Inode]] = {}  # durable entries of a directory
        self._is_dir: dict[Inode, bool] = {}
        self._pins: dict[Inode, int] = {}  # O_PATH descriptors, closed by close()
        self._lock = threading.Lock()
        self._installed = False
        weakref.finalize(self, _close_all, self._pins)

    # ----------------------------------------------------------------- public API

    def install(self, monkeypatch: pytest.MonkeyPatch) -> PowerCut:
        """Snapshot the baseline and wrap ``os.fsync`` and ``os.fdatasync``.

        The wrappers make the real call first (an error propagates, nothing is
        recorded), then record the sync if the descriptor's inode is under the root
        or already in the model. ``monkeypatch`` restores both at the test's end.
        """
        if self._installed:
            raise RuntimeError("PowerCut.install: already installed")
        self._take_baseline()
        self._installed = True
        real_fsync, real_fdatasync = os.fsync, os.fdatasync

        def fsync(fd: int | _HasFileno) -> None:
            real_fsync(fd)
            self._record(fd)

        def fdatasync(fd: int | _HasFileno) -> None:
            real_fdatasync(fd)
            self._record(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        return self

    def cut(self) -> None:
        """Power loss: replace everything under the root by what survives.

        The rebuilt tree is then the new baseline (it is what is on disk after the
        reboot), so a test can run recovery code and cut again.
        """
        with self._lock:
            if self._root is None:
                raise RuntimeError("PowerCut.cut: install() first (or closed)")
            plan = self._plan()
            content = {
                inode: self._surviving_bytes(inode) for _, inode in plan if not self._is_dir[inode]
            }
            for name in os.listdir(self.root):
                path = os.path.join(self.root, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
            first_name: dict[Inode, str] = {}
            for rel, inode in plan:
                path = os.path.join(self.root, rel)
                if self._is_dir[inode]:
                    os.mkdir(path)
                elif inode in first_name:
                    os.link(first_name[inode], path)
                else:
                    with open(path, "wb") as fh:
                        fh.write(content[inode])
                    first_name[inode] = path
            self._take_baseline()

    def close(self) -> None:
        """Close the pins and stop recording (the wrappers still call the real sync)."""
        with self._lock:
            self._root = None
            _close_all(self._pins)

    @property
    def synced_files(self) -> list[str]:
        """The paths of :attr:`log`'s file syncs, in order."""
        return [s.path for s in self.log if s.kind == "file"]

    @property
    def synced_dirs(self) -> list[str]:
        """The paths of :attr:`log`'s directory syncs, in order."""
        return [s.path for s in self.log if s.kind == "dir"]

    # ------------------------------------------------------------------ recording

    def _record(self, fd_or_file: int | _HasFileno) -> None:
        fd = fd_or_file if isinstance(fd_or_file, int) else fd_or_file.fileno()
        with self._lock:
            if self._root is None:
                return
            st = os.fstat(fd)
            inode = (st.st_dev, st.st_ino)
            path = os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
            rel = self._relative(path)
            if rel is None and inode not in self._pins:
                return  # not ours: a file outside the root
            if stat.S_ISDIR(st.st_mode):
                self._pin(f"/proc/self/fd/{fd}")  # the same inode: it is open
                self._entries[inode] = self._list(inode)
                self.log.append(Sync("dir", rel or path))
            elif stat.S_ISREG(st.st_mode):
                self._pin(f"/proc/self/fd/{fd}")
                self._content[inode] = _read_fd(fd)
                self.log.append(Sync("file", rel or path))

    def _relative(self, path: str) -> str | None:
        if path == self.root:
            return "."
        if path.startswith(self.root + os.sep):
            return path[len(self.root) + 1 :].replace(os.sep, "/")
        return None

    def _pin(self, path: str, dir_fd: int | None = None) -> Inode:
        """Pin the inode at ``path`` and return it. A final symlink is not followed,
        except ``/proc/self/fd/N``'s, which names the descriptor's own inode."""
        flags = os.O_PATH | os.O_CLOEXEC
        if not path.startswith("/proc/self/fd/"):
            flags |= os.O_NOFOLLOW
        fd = _open(path, flags, dir_fd)
        st = os.fstat(fd)
        inode = (st.st_dev, st.st_ino)
        if inode in self._pins:
            os.close(fd)
        elif stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
            self._pins[inode] = fd
            self._is_dir[inode] = stat.S_ISDIR(st.st_mode)
        else:
            os.close(fd)
            shown = path if dir_fd is None else os.path.join(_fd_path(dir_fd), path)
            raise NotImplementedError(
                f"PowerCut models regular files and directories only, not {shown!r} "
                f"(mode {stat.filemode(st.st_mode)})"
            )
        return inode

    def _list(self, directory: Inode) -> dict[str, Inode]:
        """The current entries of a pinned directory, each pinned."""
        fd = _open(f"/proc/self/fd/{self._pins[directory]}", os.O_RDONLY | os.O_DIRECTORY)
        try:
            return {name: self._pin(name, fd) for name in sorted(os.listdir(fd))}
        finally:
            os.close(fd)

    def _take_baseline(self) -> None:
        """Forget the model and make the current tree under the root durable."""
        _close_all(self._pins)
        self._content.clear()
        self._entries.clear()
        self._is_dir.clear()
        root = self._pin(self.root)
        if not self._is_dir[root]:
            raise NotADirectoryError(self.root)
        self._root = root
        todo = [root]
        while todo:
            directory = todo.pop()
            self._entries[directory] = self._list(directory)
            for inode in self._entries[directory].values():
                if self._is_dir[inode]:
                    todo.append(inode)
                elif inode not in self._content:
                    self._content[inode] = _read_fd(self._pins[inode])

    # ----------------------------------------------------------------- the cut

    def _plan(self) -> list[tuple[str, Inode]]:
        """The surviving tree: (path relative to the root, inode), parents first."""
        assert self._root is not None
        plan: list[tuple[str, Inode]] = []
        placed_dirs = {self._root}
        queue: deque[tuple[str, Inode]] = deque([("", self._root)])
        while queue:
            rel, directory = queue.popleft()
            for name, inode in sorted(self._entries.get(directory, {}).items()):
                path = os.path.join(rel, name) if rel else name
                if self._is_dir[inode]:
                    if inode in placed_dirs:
                        continue  # a directory has one parent
                    placed_dirs.add(inode)
                    queue.append((path, inode))
                plan.append((path, inode))
        return plan

    def _surviving_bytes(self, inode: Inode) -> bytes:
        """The durable bytes if the file still holds them, else empty (worst case)."""
        durable = self._content.get(inode)
        if durable is None:
            return b""
        return durable if _read_fd(self._pins[inode]) == durable else b""


# ------------------------------------------------------------------------ helpers


def _open(path: str, flags: int, dir_fd: int | None = None) -> int:
    """``os.open``; on EMFILE (many pins) raise the soft descriptor limit once."""
    try:
        return os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        raised = soft * 4 if hard == resource.RLIM_INFINITY else hard
        if raised <= soft:
            raise
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        return os.open(path, flags, dir_fd=dir_fd)


def _read_fd(fd: int) -> bytes:
    """All bytes of the file open on ``fd`` (any access mode, ``O_PATH`` too), from 0."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    if not flags & os.O_PATH and flags & os.O_ACCMODE != os.O_WRONLY:
        try:
            return _pread_all(fd)
        except OSError:
            pass  # e.g. O_DIRECT's alignment: read through a plain descriptor
    reader = _open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _pread_all(reader)
    finally:
        os.close(reader)


def _pread_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def _close_all(pins: dict[Inode, int]) -> None:
    for fd in pins.values():
        os.close(fd)
    pins.clear()


def read_tree(root: str | os.PathLike[str]) -> dict[str, bytes | None]:
    """Every path under ``root`` (relative, ``/`` separators) -> its bytes, or None
    for a directory: what a test compares after :meth:`PowerCut.cut`."""
    tree: dict[str, bytes | None] = {}
    base = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(base):
        rel = os.path.relpath(dirpath, base)
        for name in dirnames + filenames:
            path = name if rel == "." else f"{rel}/{name}".replace(os.sep, "/")
            full = os.path.join(dirpath, name)
            if name in dirnames:
                tree[path] = None
            else:
                with open(full, "rb") as fh:
                    tree[path] = fh.read()
    return tree
