"""A real Ray cluster of two nodes on this machine, the second unable to see the driver's files,
for the multi-node tests and benchmark (`tests/integration/_ray_nodes.py` is its test-side name).
Starts Ray's own commands as subprocesses; imports nothing of Ray.

    with two_nodes(hidden=tmp_path / "driver") as nodes:
        run(["agenthub", "train", "--ray-address", nodes.address,
             'ray.learner_resources={"second_node": 1}', ...])
        nodes.node_ids["second_node"]   # the second node's Ray node id
        nodes.stop_second()             # the second node lost (its raylet and actors killed)
        nodes.restart_second()          # and back (node_ids["second_node"] its new id)

`two_nodes` starts a head (`ray start --head --block`, custom resource `head_node`) and a second
node (`ray start --address=... --block`, custom resource `second_node`), each with its own
`num_cpus`, as subprocesses of their own process groups, and waits until the cluster holds both.
Ray gives a joining node 30 s to register with the head; on a busy machine the head may answer
later, and the second node's `ray start` gives up: it is started again (`JOIN_ATTEMPTS`).
The second node runs in a private mount namespace where `hidden` (the directory holding the
run directory and the model copy of the test) is covered by an empty tmpfs: a process of that
node reading a path of the driver finds nothing, as on another machine. The head node runs
where the driver does and sees everything. Leaving the block stops both nodes, whatever
happened: SIGTERM to each `ray start --block` (which ends its node's processes), then SIGKILL
to its process group. What goes wrong raises with the nodes' own output; nothing is skipped.
Needs root for the mount namespace (as on this project's machines and CI).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["HEAD", "SECOND", "RayNodes", "ray_env", "two_nodes"]

HEAD = "head_node"
"""The head node's custom resource."""
SECOND = "second_node"
"""The second node's custom resource."""

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
JOIN_ATTEMPTS = 3
"""How many times the second node is started before the cluster is given up (`RayNodes._join`)."""


@dataclass
class RayNodes:
    """The running cluster: `address` (`host:port`, for `--ray-address` and `ray.init`),
    `node_ids` (Ray node id by custom resource, `HEAD` and `SECOND`), `logs` (where each
    node's `ray start` output goes)."""

    address: str
    node_ids: dict[str, str]
    logs: Path
    _processes: dict[str, subprocess.Popen[bytes]] = field(repr=False)
    _second: list[str] = field(default_factory=list, repr=False)
    """The command that starts the second node."""

    def stop_second(self) -> None:
        """Stop the second node, as if its machine went away: its raylet and every actor on it
        are killed at once, with no goodbye to the head, which finds it gone by its missed
        health checks. Idempotent."""
        _kill(self._processes[SECOND])

    def restart_second(self) -> None:
        """Start the second node again (stopped first if it runs), as a machine that comes
        back or a new one joining with the same resources, and wait until the cluster holds
        it: `node_ids[SECOND]` is then its new node id."""
        _stop(self._processes[SECOND])
        self._join("second-again")

    def _join(self, log: str) -> None:
        """Start the second node and wait until the cluster holds both nodes. Ray gives a
        joining node 30 s to register (a constant of its own); a head on a busy machine can
        answer later, and the node's `ray start` then ends with "timed out during startup":
        it is started again, as a machine's supervisor would, `JOIN_ATTEMPTS` times in all.
        Each attempt's output goes to `logs/<log>.log` (`<log>-2.log`, ...)."""
        gone = [self.node_ids[SECOND]] if SECOND in self.node_ids else []
        for attempt in range(1, JOIN_ATTEMPTS + 1):
            name = log if attempt == 1 else f"{log}-{attempt}"
            self._processes[SECOND] = _spawn(self._second, self.logs / f"{name}.log")
            ids, ended, said = _probe(self.address, self._processes, gone)
            if len(ids) == 2 and not ended:
                self.node_ids.update(ids)
                return
            if ended != [SECOND] or attempt == JOIN_ATTEMPTS:
                raise _failed(
                    f"found nodes {sorted(ids)} of {[HEAD, SECOND]} (attempt {attempt} of "
                    f"{JOIN_ATTEMPTS} to start the second), ended: {ended}; probe said: {said}",
                    self.logs,
                )
            _kill(self._processes[SECOND])  # what its `ray start` left of the node

    def stop(self) -> None:
        """Stop both nodes (the second first). Idempotent."""
        for name in (SECOND, HEAD):
            if name in self._processes:
                _stop(self._processes[name])


def ray_env() -> dict[str, str]:
    """The environment for Ray's commands and a run's driver: a user's shell's, without what a
    Ray started in the test process (its `RAY_AUTH_MODE`) would hand down."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    return env | {"RAY_USAGE_STATS_ENABLED": "0"}


@contextmanager
def two_nodes(hidden: Path, head_cpus: int = 2, second_cpus: int = 2) -> Iterator[RayNodes]:
    """A head node and a second node, `hidden` covered on the second (see the module)."""
    if os.geteuid() != 0:
        raise RuntimeError(
            "the two-node Ray cluster hides the driver's files from its second node in a "
            "private mount namespace, which needs root; run the test as root"
        )
    hidden.mkdir(parents=True, exist_ok=True)
    # Ray's sockets live under its temp dir, whose path must stay short (AF_UNIX limit).
    temp = Path(tempfile.mkdtemp(prefix="ray2n-"))
    logs = temp / "start-logs"
    logs.mkdir()
    address = f"127.0.0.1:{_free_port()}"
    ray = str(Path(sys.executable).with_name("ray"))
    common = ["--block", "--disable-usage-stats"]
    processes: dict[str, subprocess.Popen[bytes]] = {}
    nodes = RayNodes(address, {}, logs, processes)
    try:
        processes[HEAD] = _spawn(
            [ray, "start", "--head", f"--port={address.split(':')[1]}", f"--temp-dir={temp}",
             "--include-dashboard=false", f"--num-cpus={head_cpus}",
             f"--resources={json.dumps({HEAD: 1})}", *common],
            logs / "head.log",
        )  # fmt: skip
        _wait_port(address, processes[HEAD], logs / "head.log")
        second = [
            ray, "start", f"--address={address}", f"--num-cpus={second_cpus}",
            f"--resources={json.dumps({SECOND: 1})}", *common,
        ]  # fmt: skip
        mount = 'mount -t tmpfs agenthub-hidden "$0" && exec "$@"'
        covered = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount]
        covered += [str(hidden), *second]
        nodes._second = covered
        nodes._join("second")
        yield nodes
    finally:
        nodes.stop()
        shutil.rmtree(temp, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    # A head finding a token in ~/.ray turns token authentication on, which the drivers and
    # nodes joining it (RAY_AUTH_MODE unset) do not use: the test's cluster does without.
    # A node's SIGTERM drains it first, up to 30 s while an actor holds a lease, a wait for
    # every stop (a node lost, the teardown) that tells a test nothing: without it the node
    # ends its processes at once.
    # Ray runs its workers at niceness 15, as a local run's do not (`start_ray`): on a shared
    # machine they would wait for every other process.
    env = ray_env() | {
        "RAY_AUTH_MODE": "disabled",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        "RAY_worker_niceness": "0",
        # The head declares a node dead after this many missed health checks, one a second
        # (Ray's default: 5, one every 3 s); each waits up to 10 s for a busy node's answer.
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
    }
    with log.open("wb") as sink:
        return subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: teardown ends the whole node
        )


def _failed(what: str, logs: Path) -> RuntimeError:
    output = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(logs.glob("*")))
    return RuntimeError(f"the two-node Ray cluster: {what}\n{output}")


def _wait_port(address: str, head: subprocess.Popen[bytes], log: Path) -> None:
    host, port = address.split(":")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and head.poll() is None:
        with suppress(OSError), socket.create_connection((host, int(port)), timeout=1):
            return
        time.sleep(0.5)
    raise _failed(f"the head did not answer at {address}", log.parent)


_NODES_SCRIPT = """
import json, sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
deadline, gone = time.monotonic() + float(sys.argv[2]), json.loads(sys.argv[3])
while True:
    alive = [n for n in ray.nodes() if n["Alive"] and n["NodeID"] not in gone]
    held = {r: [n["NodeID"] for n in alive if r in n["Resources"]] for r in sys.argv[4:]}
    ids = {r: held[r][0] for r in held if len(held[r]) == 1}
    if len(ids) == len(sys.argv[4:]) or time.monotonic() > deadline:
        break
    time.sleep(0.5)
print(json.dumps(ids))
"""
"""Prints, as JSON, the node id by resource of each resource held by exactly one live node not
`gone` (the nodes stopped, which the head finds dead only after missed health checks), once
each is or at the deadline."""


def _probe(
    address: str, processes: dict[str, subprocess.Popen[bytes]], gone: list[str]
) -> tuple[dict[str, str], list[str], str]:
    """Wait until the cluster holds both nodes (none of the ids `gone`), or a node's `ray
    start` ends, or `START_TIMEOUT_S`: each node's id by its resource (those found), the
    nodes whose `ray start` ended, and the end of what the probe printed on stderr."""
    script = [_NODES_SCRIPT, address, str(START_TIMEOUT_S), json.dumps(gone), HEAD, SECOND]
    probe = subprocess.Popen(
        [sys.executable, "-c", *script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ray_env(),
    )
    deadline = time.monotonic() + START_TIMEOUT_S + 60
    while True:
        try:
            out, err = probe.communicate(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if _ended(processes) or time.monotonic() > deadline:
                probe.kill()
                out, err = probe.communicate()
                break
    ids: dict[str, str] = {}
    if probe.returncode == 0 and out.strip():
        ids = json.loads(out.strip().splitlines()[-1])
    return ids, _ended(processes), err[-2000:]


def _ended(processes: dict[str, subprocess.Popen[bytes]]) -> list[str]:
    return [name for name, p in processes.items() if p.poll() is not None]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM `ray start --block` (it ends its node's processes), then SIGKILL whatever of its
    process group is left."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=STOP_TIMEOUT_S)
    _kill(process)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL `ray start --block` and its node's processes (its process group)."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_TIMEOUT_S)
