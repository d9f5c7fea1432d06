"""sha256 of files, read at most once per process while a file is unchanged (layer 0: storage hashes
artifacts with it, rl hashes checkpoints with it).

A hash is kept for the file's identity (absolute path, device, inode, size, mtime and ctime): putting a
modification time back after editing a file still changes its ctime, so a flipped byte is read again.

A file a manifest recorded may be deleted on purpose later (a checkpoint's optimizer state, once newer
checkpoints keep the run's): the deleter leaves a note beside it (`dropped_note`), and every check of the
manifest's files skips such a file (`dropped_on_purpose`), so no later stage rewrites the manifest.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_HASHED: dict[tuple, str] = {}
"""sha256 of the files hashed (or written with a known hash) in this process, by `_identity`."""


def _identity(path: Path, stat: os.stat_result) -> tuple:
    return (os.path.abspath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 of `path`'s content, read at most once per process while the file is unchanged."""
    identity = _identity(path, os.stat(path))
    if identity not in _HASHED:
        sha = _hash_file(path)
        if _identity(path, os.stat(path)) == identity:  # not changed while it was read
            _HASHED[identity] = sha
        return sha
    return _HASHED[identity]


def remember_sha256(path: Path, sha256: str) -> None:
    """Record the hash of a file this process has just written (hashed as it was written, or under
    another name before a rename), so that checking it later reads nothing."""
    _HASHED[_identity(path, os.stat(path))] = sha256


def dropped_note(path: Path) -> Path:
    """The note left beside a recorded file deleted on purpose: `<name without suffix>.dropped`."""
    return path.with_suffix(".dropped")


def dropped_on_purpose(path: Path) -> bool:
    """Whether the recorded file `path` is gone because it was deleted on purpose (its `dropped_note` stands)."""
    return not path.exists() and dropped_note(path).is_file()
