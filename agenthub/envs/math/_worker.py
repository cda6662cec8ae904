"""A verification worker process: JSON lines in on stdin, JSON lines out on a private pipe.

Started by `VerifierPool` as `python -m agenthub.envs.math._worker PARENT_PID`. It dies with
its parent (Linux parent-death signal, and end of input everywhere), ignores Ctrl-C (the parent
decides when workers stop) and keeps stdout for its replies only.
"""

from __future__ import annotations

import json
import sys

from agenthub._worker_process import become_worker


def main() -> None:
    replies = become_worker()  # stray prints from SymPy or math-verify go to stderr

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
