"""Turns on the machine for the suite's two pytest-xdist workers (`make test` runs `-n 2`).

Integration tests run beside each other (most of them wait on one process at a time: a model
loading, a server starting, a pip install, and use one core of two), except those marked
`alone`: they change or count what is shared machine-wide (they restart the Docker engine, or
count named semaphores or sandbox users' processes), so no other integration test may run
while they do. Unit tests touch nothing shared and run beside anything.

This is a readers-writer lock over two files in the session's temporary folder, which both
workers share: an integration test holds `machine` shared, an `alone` test holds it exclusive.
A test first passes through `turnstile`, which an `alone` test holds while it waits for the
running tests to finish, so that a stream of shared turns cannot keep it waiting for ever."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
