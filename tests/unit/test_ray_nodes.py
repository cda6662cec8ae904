"""The two-node test cluster's start (agenthub/testing/_ray_nodes.py): a second node whose
`ray start` gives up while joining a busy head is started again, and the cluster is given up
with every attempt's output once that fails too. Real processes stand in for the nodes' `ray
start`; the probe of the cluster is faked here (it needs a Ray head): the multi-node test runs
the real one (tests/integration/trainer/test_multi_node.py), which also checks that the node
started again has a new id."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agenthub.testing import _ray_nodes
from agenthub.testing._ray_nodes import HEAD, JOIN_ATTEMPTS, SECOND, RayNodes


class Nodes:
    """`RayNodes` with its `_spawn` and `_probe` faked: the head a `sleep`, the second node's
    starts each a process that ends at once (as a `ray start` that timed out) until
    `fails` of them have, then a `sleep`; the probe finds the second once it is alive."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: int) -> None:
        self.fails = fails
        self.logs: list[str] = []
        self.gone: list[str] = []
        self.started: list[subprocess.Popen[bytes]] = []
        monkeypatch.setattr(_ray_nodes, "_spawn", self._spawn)
        monkeypatch.setattr(_ray_nodes, "_probe", self._probe)
        head = subprocess.Popen(["sleep", "60"], start_new_session=True)
        self.nodes = RayNodes("127.0.0.1:1", {}, tmp_path, {HEAD: head}, ["ray", "start"])

    def _spawn(self, command: list[str], log: Path) -> subprocess.Popen[bytes]:
        assert command == ["ray", "start"]
        self.logs.append(log.name)
        ends = len(self.started) < self.fails
        log.write_text("timed out during startup" if ends else "started")
        process = subprocess.Popen(["true"] if ends else ["sleep", "60"], start_new_session=True)
        if ends:
            process.wait()
        self.started.append(process)
        return process

    def _probe(
        self, address: str, processes: dict[str, subprocess.Popen[bytes]], gone: list[str]
    ) -> tuple[dict[str, str], list[str], str]:
        self.gone = gone
        ended = _ray_nodes._ended(processes)
        ids = {HEAD: "h"} | ({} if SECOND in ended else {SECOND: f"s{len(self.started)}"})
        return ids, ended, "probe output"


Make = Callable[[int], Nodes]


@pytest.fixture
def make(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Make]:
    made: list[Nodes] = []

    def make(fails: int) -> Nodes:
        made.append(Nodes(tmp_path, monkeypatch, fails))
        return made[-1]

    yield make
    for fake in made:
        for process in [*fake.started, *fake.nodes._processes.values()]:
            process.kill()
            process.wait()


def test_a_second_node_that_gives_up_joining_is_started_again(make: Make) -> None:
    fake = make(JOIN_ATTEMPTS - 1)
    fake.nodes.node_ids.update({HEAD: "h", SECOND: "the node stopped"})
    fake.nodes._join("second-again")
    assert fake.gone == ["the node stopped"], "the probe skips the node it replaces"
    assert fake.logs == ["second-again.log"] + [
        f"second-again-{n}.log" for n in range(2, JOIN_ATTEMPTS + 1)
    ]
    assert fake.nodes.node_ids == {HEAD: "h", SECOND: f"s{JOIN_ATTEMPTS}"}
    assert fake.nodes._processes[SECOND] is fake.started[-1]
    assert fake.started[-1].poll() is None


def test_the_cluster_is_given_up_with_every_attempts_output_once_the_last_start_ends(
    make: Make,
) -> None:
    fake = make(JOIN_ATTEMPTS)
    with pytest.raises(RuntimeError) as failed:
        fake.nodes._join("second")
    said = str(failed.value)
    assert f"attempt {JOIN_ATTEMPTS} of {JOIN_ATTEMPTS}" in said
    assert f"ended: ['{SECOND}']" in said and "probe output" in said
    assert said.count("timed out during startup") == JOIN_ATTEMPTS, "each attempt's log"


def test_a_head_that_ended_fails_the_start_at_once(make: Make) -> None:
    fake = make(0)
    fake.nodes._processes[HEAD].kill()
    fake.nodes._processes[HEAD].wait()
    with pytest.raises(RuntimeError, match=r"attempt 1 of .*ended: \['head_node'\]"):
        fake.nodes._join("second")
    assert len(fake.started) == 1, "no second attempt when the head is gone"
