"""Writing the files of a runs folder: atomically, never through a link planted there, and a full disk
or a file-size limit said in one paragraph (layer 0: storage writes artifacts, manifests and the run's
lock with it, rl its checkpoints).

A runs folder may be shared, copied or untarred from elsewhere, so a name in it may be a symlink to a file
of the user's (`runs/run=X/.lock -> ~/notes`): a write through it would replace that file. The project never
creates a link in a runs folder, so a writer refuses one (`PlantedLinkError`, one line naming it) at the
file it writes and at every folder from the run's own (`run=<run>`) down to it; the runs folder itself, and
what is above it, may be a link of the user's. A new file is created under a temporary name with
O_CREAT | O_EXCL | O_NOFOLLOW and renamed over its final name (`atomic_file`); the run's lock, the one file
reopened in place, is opened with O_NOFOLLOW and refused unless it is a plain file (`open_plain_file`);
one with a second name is replaced by a file of its own before it is written (`storage.lock`).

A write stopped by a full disk (ENOSPC, EDQUOT) or by the process's file-size limit (EFBIG, `ulimit -f`:
Python ignores SIGXFSZ, so the write fails instead of killing the process) is a `DiskFullError` naming the
file, the bytes it needed and the space there was (`disk_full`); its temporary file is removed, so the same
command run again once there is space writes the same data.

    with atomic_file(path, needed=len(data)) as handle:
        handle.write(data)
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import resource
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


class ArtifactError(RuntimeError):
    """A missing, corrupt or incompatible artifact, or one that cannot be written; the message says how to
    rebuild it or what to fix (the command line shows it as one paragraph, without a traceback)."""


class DiskFullError(ArtifactError):
    """A write stopped by a full disk or a file-size limit; the message names the file and the space needed."""

    def __init__(self, message: str, *, cause: str, advice: str) -> None:
        super().__init__(message)
        self.cause = cause
        """What stopped the write (`no space left on the device holding PATH: it needs about ...`), for a
        caller that says which stage stopped."""
        self.advice = advice
        """What to do before running the command again (`Free space`, `Raise the limit`)."""


class PlantedLinkError(ArtifactError):
    """A symlink (or a second name) in a runs folder that the project did not create; nothing was written."""


_OUT_OF_SPACE = {errno.ENOSPC: "space", errno.EDQUOT: "quota", errno.EFBIG: "limit"}
_OUT_OF_SPACE_TEXT = re.compile(r"No space left on device|os error 28\b|Disk quota exceeded|os error 122\b"
                                r"|File too large|os error 27\b")  # fmt: skip
"""What libraries writing in native code (safetensors) say instead of an errno."""


def refuse_links(path: Path) -> None:
    """Raise `PlantedLinkError` if `path`, or a folder between the run's folder (`run=<run>`, included) and
    it, is a symlink. A path outside any run's folder has only its last part checked."""
    path = Path(path)
    parts = [path]
    for parent in path.parents:
        parts.append(parent)
        if parent.name.startswith("run="):
            break
    else:
        parts = [path]
    for part in parts:
        try:
            mode = os.lstat(part).st_mode
        except OSError:
            continue  # not there yet: it will be made as a folder or file of ours
        if stat.S_ISLNK(mode):
            raise PlantedLinkError(_link_message(part, path))


def _link_message(link: Path, path: Path) -> str:
    try:
        target = f" (to {os.readlink(link)})"
    except OSError:
        target = ""
    where = "" if link == path else f" (a folder above {path})"
    return (f"{link} is a symlink{target}{where}; this project never makes links in a runs folder, so it was "
            f"planted or copied in, and nothing was written through it: remove it (`rm {link}`) and run the "
            f"command again")


@contextlib.contextmanager
def atomic_file(path: Path, *, mode: str = "wb", needed: int | None = None) -> Iterator[IO[Any]]:
    """A file object to write `path`'s new content to: a temporary file created beside it (never through
    a link), fsynced and renamed over `path` when the block ends; removed when it fails, a full disk or a
    file-size limit being a `DiskFullError` (`needed`: the bytes the file takes, if known)."""
    path = Path(path)
    refuse_links(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    handle = _create_new(tmp, mode)
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        refuse_links(path)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):  # the write's own error is the one to report
            tmp.unlink()
        full = disk_full(exc, path, needed)
        if full is not None and full is not exc:
            raise full from exc
        raise


def write_text_atomic(text: str, path: Path) -> None:
    """Write `text` to `path` atomically (`atomic_file`)."""
    data = text.encode()
    with atomic_file(path, needed=len(data)) as handle:
        handle.write(data)


def _create_new(path: Path, mode: str) -> IO[Any]:
    """`path` created afresh (O_EXCL, O_NOFOLLOW) and opened for writing; a leftover plain file of that name
    (a writer killed half-way) is removed first, a symlink refused."""
    refuse_links(path)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    return os.fdopen(fd, mode)


def open_plain_file(path: Path, *, other_names: bool = False) -> int:
    """A read-write descriptor of `path` (created if missing), refused with `PlantedLinkError` when it is
    a symlink, not a plain file, or (unless `other_names`: the caller never writes it before checking
    `st_nlink`) a file with a second name elsewhere (a hard link): rewriting it in place would change that
    other file."""
    path = Path(path)
    refuse_links(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PlantedLinkError(_link_message(path, path)) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or (info.st_nlink != 1 and not other_names):
        os.close(fd)
        what = "not a plain file" if not stat.S_ISREG(info.st_mode) else f"a file with {info.st_nlink} names"
        raise PlantedLinkError(f"{path} is {what}; this project never makes one in a runs folder, so it was "
                               f"planted or copied in, and nothing was written to it: remove it (`rm {path}`) "
                               f"and run the command again")
    return fd


def disk_full(exc: BaseException, path: Path, needed: int | None = None) -> DiskFullError | None:
    """`exc` as a `DiskFullError` naming `path` (`needed`: the bytes the file takes, if known) when it, or an
    error it came from, is a full disk, a used-up quota or the file-size limit; else None."""
    if isinstance(exc, DiskFullError):
        return exc
    kind = _out_of_space_kind(exc)
    if kind is None:
        return None
    need = f"it needs about {human_size(needed)}" if needed is not None else "it needs more than there is"
    if kind == "limit":
        cause = (f"the file-size limit of this process ({human_size(file_size_limit())}, `ulimit -f`) stopped the "
                 f"write of {path}: {need}")
        advice = "Raise the limit"
    else:
        free = free_bytes(path)
        there = "" if free is None else f", {human_size(free)} free there"
        what = "the disk quota is used up on" if kind == "quota" else "no space left on"
        cause = f"{what} the device holding {path}: {need}{there}"
        advice = "Free space"
    return DiskFullError(f"{cause[0].upper()}{cause[1:]}. {advice} and run the same command again: what was "
                         f"written before is kept.", cause=cause, advice=advice)


def _out_of_space_kind(exc: BaseException | None) -> str | None:
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_SPACE:
            return _OUT_OF_SPACE[exc.errno]
        found = _OUT_OF_SPACE_TEXT.search(str(exc))
        if found:
            text = found.group(0)
            return "limit" if "27" in text or "large" in text else "quota" if "122" in text or "quota" in text else "space"
        exc = exc.__cause__ or exc.__context__
    return None


def free_bytes(path: Path) -> int | None:
    """Bytes free to this user on the device holding `path` (its nearest existing folder), or None."""
    for folder in (Path(path), *Path(path).parents):
        with contextlib.suppress(OSError):
            found = os.statvfs(folder)
            return found.f_bavail * found.f_frsize
    return None


def file_size_limit() -> int | None:
    """This process's file-size limit (`ulimit -f`) in bytes, or None when there is none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def human_size(n: int | None) -> str:
    """`n` bytes in decimal units, one decimal: "538.1 MB", "3.2 GB" (`du --si` reads alike)."""
    if n is None:
        return "an unknown size"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
