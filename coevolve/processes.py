"""Child processes that end with the process that started them.

A server or a launched update started by a command must not outlive it: when the command is stopped in
any way, `kill -9` included, its children get SIGTERM from the kernel (Linux `PR_SET_PDEATHSIG`, set in the
child before it runs; on other systems nothing is set).

    subprocess.Popen(command, preexec_fn=die_with_parent)
"""

from __future__ import annotations

import contextlib
import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before exec: receive SIGTERM when the parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
