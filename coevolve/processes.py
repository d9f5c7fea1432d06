"""Child processes that end with the process that started them, and a free port for one to serve on.

A server or a launched update started by a command must not outlive it: when the command is stopped in
any way, `kill -9` included, its children get SIGTERM from the kernel (Linux `PR_SET_PDEATHSIG`, set in the
child before it runs; on other systems nothing is set).

    subprocess.Popen(command, preexec_fn=die_with_parent)
    port = free_port()                     # a loopback port for a server the command starts
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a child before exec: receive SIGTERM when the parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    """A loopback port nothing listens on now (bound, then released) for a child server to take."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
