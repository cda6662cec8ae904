"""The readers-writer lock and the scheduler `make test`'s two xdist workers share
(tests/_machine_turn.py, tests/_group_scheduling.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._machine_turn import Turns, machine_turn, write_groups


class Turn:
    """A turn taken in a thread of its own (flock locks each open file apart, so threads stand
    in for the two workers), held until `release`."""

    def __init__(self, folder: Path, *, alone: bool) -> None:
        self.held = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._hold, args=(folder, alone), daemon=True)
        self._thread.start()

    def _hold(self, folder: Path, alone: bool) -> None:
        with machine_turn(folder, alone=alone):
            self.held.set()
            self._release.wait()

    def release(self) -> None:
        self._release.set()
        self._thread.join(timeout=30)


@pytest.fixture
def turns(tmp_path: Path) -> Iterator[list[Turn]]:
    taken: list[Turn] = []
    yield taken
    for turn in taken:
        turn.release()


def _take(turns: list[Turn], folder: Path, *, alone: bool) -> Turn:
    turn = Turn(folder, alone=alone)
    turns.append(turn)
    return turn


def test_shared_turns_run_together_and_an_alone_one_waits_for_them(
    tmp_path: Path, turns: list[Turn]
) -> None:
    first = _take(turns, tmp_path, alone=False)
    second = _take(turns, tmp_path, alone=False)
    assert first.held.wait(10) and second.held.wait(10)
    alone = _take(turns, tmp_path, alone=True)
    assert not alone.held.wait(0.3)
    first.release()
    assert not alone.held.wait(0.3)
    second.release()
    assert alone.held.wait(10)


def test_a_waiting_alone_turn_goes_before_shared_turns_asked_after_it(
    tmp_path: Path, turns: list[Turn]
) -> None:
    running = _take(turns, tmp_path, alone=False)
    assert running.held.wait(10)
    alone = _take(turns, tmp_path, alone=True)
    assert not alone.held.wait(0.3)
    later = _take(turns, tmp_path, alone=False)
    assert not later.held.wait(0.3), "a shared turn overtook the alone one waiting"
    running.release()
    assert alone.held.wait(10)
    assert not later.held.wait(0.3), "a shared turn ran beside the alone one"
    alone.release()
    assert later.held.wait(10)


def test_a_worker_keeps_its_alone_turn_between_two_alone_tests(
    tmp_path: Path, turns: list[Turn]
) -> None:
    worker = Turns(tmp_path)
    with worker.of(alone=True, next_alone=True):
        pass
    other = _take(turns, tmp_path, alone=False)
    assert not other.held.wait(0.3), "the other worker slipped a test in between"
    with worker.of(alone=True, next_alone=False):
        assert not other.held.is_set()
    assert other.held.wait(10), "the turn is let go after the last alone test"
    with worker.of(alone=False, next_alone=False):
        assert other.held.is_set(), "shared turns run together"


def test_the_scheduler_takes_the_workers_groups_and_leaves_the_rest_apart(tmp_path: Path) -> None:
    from tests._group_scheduling import GroupScheduling

    write_groups(tmp_path, {"a.py::t1": "alone", "a.py::t2": "alone", "b.py::t": "serve"})
    config = pytest.Config.fromdictargs({"tx": ["popen"] * 2}, [])
    scheduling = GroupScheduling(config, None, tmp_path)
    scopes = [scheduling._split_scope(n) for n in ("a.py::t1", "a.py::t2", "b.py::t", "c.py::t")]
    assert scopes == ["alone", "alone", "serve", "c.py::t"]
