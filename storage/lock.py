"""One writer per run: an exclusive lock on `run=<run>/.lock` held while a command writes the run.

`coevolve run` (and the deployment's flow), `coevolve stage` and `coevolve fork` hold it. A second writer
does not wait: it stops at once with one line naming the holder (process, host, command, since when),
because two writers would compute the same stages and one would delete the other's files when it
invalidates a stage. The lock is an OS advisory lock (`flock`) on an open file, so it ends with the
process that holds it, even on `kill -9`: a crashed run never leaves a stale lock behind. The lock file is
opened without following a symlink and refused unless it is a plain file of the run's own
(`coevolve.run_files.open_plain_file`): a `.lock` planted as a link to a user's file is one line, and that
file is left as it was. A disk too full to write the holder's line is a `DiskFullError` naming the file.

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

from coevolve.run_files import disk_full, open_plain_file
from coevolve.storage.layout import RunLayout
from coevolve.storage.parquet import ArtifactError

LOCK_FILE = ".lock"


class RunLockedError(ArtifactError):
    """Another process is writing the run; the message names it."""


@contextlib.contextmanager
def run_lock(layout: RunLayout, command: str) -> Iterator[None]:
    """Hold the run's write lock for the block, or raise `RunLockedError` naming the process that holds it."""
    path = layout.run_dir / LOCK_FILE
    fd = open_plain_file(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLockedError(_held_by(layout, os.read(fd, 1 << 16).decode(errors="replace"))) from None
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


def _held_by(layout: RunLayout, text: str) -> str:
    try:
        holder = json.loads(text)
        who = (f"process {holder['pid']} on {holder['host']} (`{holder['command']}`, since "
               f"{holder['since']})")  # fmt: skip
    except (ValueError, KeyError, TypeError):
        who = "another process"
    return (f"run '{layout.run}' is being written by {who}. Wait for it to finish (or stop it), then run the "
            f"command again: completed stages are kept.")
