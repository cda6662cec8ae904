"""A reward-file worker process: pickled argument tuples in on stdin, pickled replies out on a
private pipe.

Started by `_function._Worker` as `python -m agenthub.envs.reward_func._worker PARENT_PID
FILE`. It takes the parent's `sys.path`, imports FILE once, answers `("ready",)`, then for each
request calls `reward_func` in its main thread and answers `("ok", result)` or `("error", type
name, message, traceback text, frames)`, the frames for `RemoteTraceback`. It dies with its
parent and keeps stdout for its replies: the function's prints go to stderr.
"""

from __future__ import annotations

import pickle
import sys
import traceback
from pathlib import Path
from typing import Any, BinaryIO

from agenthub._tracebacks import Frame, frames_of
from agenthub._worker_process import become_worker


def main() -> None:
    replies = become_worker()
    sys.path[:] = pickle.load(sys.stdin.buffer)  # the parent's: the file imports as it did there
    from agenthub.envs.reward_func._function import import_reward_func

    try:
        func = import_reward_func(Path(sys.argv[2]))
    except Exception as exc:
        _send(replies, _error(exc))
        return
    _send(replies, ("ready",))
    while True:
        try:
            args = pickle.load(sys.stdin.buffer)
        except EOFError:
            return
        try:
            reply: tuple[Any, ...] = ("ok", func(*args))
        except Exception as exc:
            reply = _error(exc)
        _send(replies, reply)


def _error(exc: BaseException) -> tuple[str, str, str, str, list[Frame]]:
    return ("error", type(exc).__name__, str(exc), traceback.format_exc(), frames_of(exc))


def _send(replies: BinaryIO, reply: tuple[Any, ...]) -> None:
    try:
        data = pickle.dumps(reply)
    except Exception as exc:  # what the function returned cannot leave this process
        data = pickle.dumps(
            ("error", type(exc).__name__, f"its result cannot be pickled: {exc}", "", [])
        )
    replies.write(data)


if __name__ == "__main__":
    main()
