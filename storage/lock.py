"""One writer per run: an exclusive lock on `run=<run>/.lock` held while a command writes the run.

`coevolve run` (and the deployment's flow), `coevolve stage` and `coevolve fork` hold it. A second writer
does not wait: it stops at once with one line naming the holder (process, host, command, since when),
because two writers would compute the same stages and one would delete the other's files when it
invalidates a stage. The lock is an OS advisory lock (`flock`) on an open file, so it ends with the
process that holds it, even on `kill -9`: a crashed run never leaves a stale lock behind. The lock file is
opened without following a symlink and refused unless it is a plain file
(`coevolve.run_files.open_plain_file`): a `.lock` planted as a symlink to a user's file is one line, and
that file is left as it was. A lock with a second name (the README's `cp -al runs runs-before` snapshot
shares every file with its copy; or one planted as a hard link) is never written: once locked, it is
replaced by a new empty file of the run's own, which is locked in its place, and the other name keeps its
bytes. Whoever locks a file checks that the path still names it, so two writers never hold two files. A
disk too full to write the holder's line is a `DiskFullError` naming the file.

    with run_lock(layout, "coevolve run configs/demo.yaml"):
        ...                                     # RunLockedError if another process writes the run
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import socket
from collections.abc import Iterator

from coevolve.run_files import atomic_file, disk_full, open_plain_file
from coevolve.storage.layout import RunLayout
from coevolve.storage.parquet import ArtifactError

LOCK_FILE = ".lock"


class RunLockedError(ArtifactError):
    """Another process is writing the run; the message names it."""


@contextlib.contextmanager
def run_lock(layout: RunLayout, command: str) -> Iterator[None]:
    """Hold the run's write lock for the block, or raise `RunLockedError` naming the process that holds it."""
    path = layout.run_dir / LOCK_FILE
    fd = _lock_own_file(layout, path)
    try:
        holder = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                             "since": datetime.datetime.now().isoformat(timespec="seconds")}).encode()  # fmt: skip
        try:
            os.ftruncate(fd, 0)
            written = 0
            while written < len(holder):  # a write that reaches the file-size limit stops short, the next fails
                written += os.pwrite(fd, holder[written:], written)
        except OSError as exc:
            full = disk_full(exc, path, len(holder))
            if full is None:
                raise
            raise full from exc
        yield
    finally:
        os.close(fd)  # closing the file releases the lock


def _lock_own_file(layout: RunLayout, path: os.PathLike) -> int:
    """A descriptor of the run's lock file, locked, with one name (the path's); see the module docstring."""
    while True:
        fd = open_plain_file(path, other_names=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 1 << 16).decode(errors="replace") if os.fstat(fd).st_nlink == 1 else ""
            os.close(fd)
            raise RunLockedError(_held_by(layout, text)) from None
        locked = os.fstat(fd)
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(path).st_ino == locked.st_ino and locked.st_nlink == 1:
                return fd
            if os.lstat(path).st_ino == locked.st_ino:  # a second name: a file of its own, under our lock
                with atomic_file(path, needed=0):
                    pass
        os.close(fd)  # replaced meanwhile (by us or by the writer before us): lock what the path names now


def _held_by(layout: RunLayout, text: str) -> str:
    try:
        holder = json.loads(text)
        who = (f"process {holder['pid']} on {holder['host']} (`{holder['command']}`, since "
               f"{holder['since']})")  # fmt: skip
    except (ValueError, KeyError, TypeError):
        who = "another process"
    return (f"run '{layout.run}' is being written by {who}. Wait for it to finish (or stop it), then run the "
            f"command again: completed stages are kept.")
