"""How `make test`'s two pytest-xdist workers share the machine (`-n 2 --dist
loadgroup`).

Tests run two at a time: most integration tests wait on one process at a time (a model
loading, a server starting, a pip install) and use one core of two. Those marked `alone`
change or count what is shared machine-wide (they restart the Docker engine, or count named
semaphores, which unit tests make too, or the sandbox users' processes), so no other test may
run while they do.

- `machine_turn`: a readers-writer lock over two files in the session's temporary folder, which
  the workers share. A test holds `machine` shared, an `alone` test exclusive. A
  test first passes through `turnstile`, which an `alone` test holds while it waits for the
  running tests to finish, so that a stream of shared turns cannot keep it waiting for ever.
- `GroupScheduling` (tests/_group_scheduling.py): xdist's scope scheduler over the groups the
  workers wrote at collection (`write_groups`), in the order of their collection (longest
  first): the `alone` tests as one unit; the modules whose tests use a session fixture each
  worker would build for itself (the `vllm serve`, the hub venvs) as one unit, so it is built
  once; the busy training runs as one unit; each module with a module-scoped fixture of its
  own as one unit (tests/conftest.py); every other test on its own."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

GROUPS = "xdist-groups.json"


@contextmanager
def machine_turn(folder: Path, *, alone: bool) -> Iterator[None]:
    """Hold a turn on the machine: the only one if `alone`, else one of many."""
    with (folder / "turnstile").open("a") as turnstile, (folder / "machine").open("a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)


class Turns:
    """One worker's turns, one a test; but an `alone` turn is kept for the next test when that
    one is `alone` too: let go between them, the other worker would slip a test in, which runs
    by itself while this one waits."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._kept: ExitStack | None = None

    @contextmanager
    def of(self, *, alone: bool, next_alone: bool) -> Iterator[None]:
        stack, self._kept = self._kept, None
        if stack is None:
            stack = ExitStack()
            stack.enter_context(machine_turn(self.folder, alone=alone))
        try:
            yield
        finally:
            if alone and next_alone:
                self._kept = stack
            else:
                stack.close()


def write_groups(folder: Path, groups: dict[str, str]) -> None:
    """Each grouped test's group by node id, for the scheduler (both workers write the same)."""
    staged = folder / f"{GROUPS}.{os.getpid()}"
    staged.write_text(json.dumps(groups))
    staged.replace(folder / GROUPS)
