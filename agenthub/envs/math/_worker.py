"""A verification worker process: JSON lines in on stdin, JSON lines out on a private pipe.

Started by `VerifierPool` as `python -m agenthub.envs.math._worker PARENT_PID`. It dies with
its parent (Linux parent-death signal, and end of input everywhere), ignores Ctrl-C (the parent
decides when workers stop) and keeps stdout for its replies only.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(0)


def main() -> None:
    _die_with_parent(int(sys.argv[1]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints from SymPy or math-verify must not corrupt the replies

    from agenthub.envs.math._check import check, quiet_math_verify

    quiet_math_verify()
    replies.write(b'{"ready": true}\n')
    for line in sys.stdin.buffer:
        request = json.loads(line)
        reply: dict[str, object]
        try:
            reply = {"ok": check(request["response"], request["gold"])}
        except Exception as exc:  # a bad input is a wrong answer, never a dead worker
            reply = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        replies.write(json.dumps(reply).encode() + b"\n")


if __name__ == "__main__":
    main()
