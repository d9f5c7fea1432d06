"""Fault injection for the tests in tests/integration/test_faults.py (never installed, never imported by
the project): a process started with this folder on PYTHONPATH and

    COEVOLVE_TEST_KILL=<before|after>:<text>:<n>

kills itself with SIGKILL at the n-th atomic rename (`os.replace`) whose destination contains <text>:
`before` leaves the new file written under its temporary name (a stage stopped in the middle of its
writes), `after` stops right after it is in place (at a stage boundary, for a manifest)."""

import os
import signal

_SPEC = os.environ.get("COEVOLVE_TEST_KILL")

if _SPEC:
    _when, _text, _n = _SPEC.split(":")
    _seen = [0]
    _replace = os.replace

    def _replace_and_maybe_die(src, dst, *args, **kwargs):
        hit = _text in str(dst)
        if hit:
            _seen[0] += 1
        if hit and _when == "before" and _seen[0] == int(_n):
            os.kill(os.getpid(), signal.SIGKILL)
        result = _replace(src, dst, *args, **kwargs)
        if hit and _when == "after" and _seen[0] == int(_n):
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    os.replace = _replace_and_maybe_die
