"""Where an exception from a user's code was raised, in one line: the line of *their* code to
look at, not agenthub's, which called it or was called by it."""

from __future__ import annotations

import importlib.util
import os
import sysconfig
import traceback
from collections.abc import Sequence
from pathlib import Path

Frame = tuple[str, int, str]
"""(file, line, function) of one frame a traceback went through."""


def _folder(package: str) -> str | None:
    spec = importlib.util.find_spec(package)  # where it is, without importing it
    locations = spec.submodule_search_locations if spec is not None else None
    return os.path.join(locations[0], "") if locations else None


_AGENTHUB = os.path.join(Path(__file__).parent, "")
_PYDANTIC = _folder("pydantic") or _AGENTHUB
# Code that only carries a user's call, or builds what they asked for: a frame there is never
# the line to look at while one of the user's own is on the way.
_PASSED_THROUGH = tuple(f for f in (_AGENTHUB, _PYDANTIC, _folder("anyio")) if f)
_STDLIB = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("stdlib", "platstdlib")})
_INSTALLED = tuple(os.path.join(os.sep, name, "") for name in ("site-packages", "dist-packages"))


class RemoteTraceback(Exception):
    """The traceback of an exception raised in another process (a worker's), for the
    exception's stand-in here to be raised `from`: shown as the text that process formatted,
    and read by `raised_at` as the `frames` it went through, so the error can still name a line
    of the user's file although none of that process's frames exist here."""

    def __init__(self, text: str, frames: Sequence[Frame] = ()) -> None:
        super().__init__(text)
        self.frames = [(str(f), int(n), str(name)) for f, n, name in frames]

    def __str__(self) -> str:
        return "\n" + str(self.args[0])


def frames_of(exc: BaseException) -> list[Frame]:
    """The frames `exc` went through, outermost first, as `RemoteTraceback` carries them."""
    return [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(exc.__traceback__)]


def described(exc: BaseException) -> str:
    """`KeyError: 'held_out'`, or the type's name alone for an exception without a message
    (`NotImplementedError`, not `NotImplementedError: `)."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def raised(what: str, exc: BaseException) -> str:
    """`WHAT raised KeyError: 'held_out' (raised at FILE:LINE, in FUNCTION)`: a call into the
    user's code that failed, said in one line that points at the line to look at."""
    return f"{what} raised {described(exc)}{raised_at(exc)}"


def raised_at(exc: BaseException, *, fallback: bool = True) -> str:
    """` (raised at FILE:LINE, in FUNCTION)`, for a one-line report of an env's failure that
    points at the line to look at.

    That is the innermost frame of the user's own code: not agenthub's (a `Step` refusing a NaN
    reward raises in agenthub, but the line to fix is the user's `return Step(...)`), nor
    pydantic's, anyio's or the standard library's, which only carry the call. An installed
    package's frame on `exc`'s own way (a plugin installed without `-e`, or a library the
    user's code called) is the next best. The user's frame is looked for first in what `exc`
    was raised from (`__cause__`, its root first), then in `exc`, then in what it was raised
    while handling (`__context__`):
    agenthub wraps a user's error in one of its own (`AgentFuncError`, `RewardFuncError`)
    whose frames lead only to agenthub or to whoever called it, and an error from a reward
    file's worker process arrives as a `RemoteTraceback` holding that process's frames.

    With no such frame the failure is agenthub's own, a built-in env's say, and agenthub's
    line is the one to look at: the innermost frame of `exc` outside pydantic is named then,
    or nothing with `fallback=False` (for a message where agenthub's line would say nothing
    to the user).
    """
    for each in _chain(exc):
        if found := [f for f in _frames(each) if _users(f[0])]:
            return _where(found[-1])
    # An installed package's frame only on `exc`'s own way: what a built-in env wraps (a
    # Docker engine's error in a SandboxError) would name the library's insides otherwise.
    if found := [f for f in _frames(exc) if _installed(f[0])]:
        return _where(found[-1])
    if not fallback:
        return ""
    frames = _frames(exc)
    # A model that rejects its fields raises from pydantic's own code: the line to look at is
    # the one that built it.
    ours = [f for f in frames if not f[0].startswith(_PYDANTIC)] or frames
    return _where(ours[-1]) if ours else ""


def blamed(stack: Sequence[Frame]) -> int | None:
    """Which frame of a live `stack` (outermost first) to name for what it is doing: the
    innermost of the user's own code inside agenthub's first frame (outside it are only the
    callers: a console script, a test, a script's `asyncio.run`); else, past agenthub's last
    frame, the outermost of an installed package (a plugin installed without `-e`, which calls
    the libraries inside it); None when there is neither."""
    carried = [i for i, (filename, _, _) in enumerate(stack) if filename.startswith(_AGENTHUB)]
    inside = range(carried[0] + 1 if carried else 0, len(stack))
    users = [i for i in inside if _users(stack[i][0])]
    if users:
        return users[-1]
    start = carried[-1] + 1 if carried else 0
    return next((i for i in range(start, len(stack)) if _installed(stack[i][0])), None)


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions behind it, where the user's mistake most likely is first: the
    root of a `raise ... from` chain (the wrapped failure), then `exc`, then what it was raised
    while handling, last because a bug in an `except` block is the block's own."""
    wrapped: list[BaseException] = []
    current = exc
    while (cause := current.__cause__) is not None and cause is not exc and cause not in wrapped:
        wrapped.append(cause)
        current = cause
    chain = [*reversed(wrapped), exc]
    current = exc
    while not current.__suppress_context__ and (context := current.__context__) is not None:
        if context in chain:
            break
        chain.append(context)
        current = context
    return chain


def _frames(exc: BaseException) -> list[Frame]:
    return exc.frames if isinstance(exc, RemoteTraceback) else frames_of(exc)


def _users(filename: str) -> bool:
    return not (
        filename.startswith(_PASSED_THROUGH)
        or filename.startswith(_STDLIB)
        or filename.startswith("<")  # code made at run time (a dataclass's __init__): no file
        or _installed(filename)
    )


def _installed(filename: str) -> bool:
    return any(part in filename for part in _INSTALLED) and not filename.startswith(_PASSED_THROUGH)


def _where(frame: Frame) -> str:
    filename, lineno, name = frame
    return f" (raised at {filename}:{lineno}, in {name})"
