"""A `code_exec` training run on the embedded default model, its learner two data-parallel
ranks, that meets a schedule of faults and still reaches its step count: its rollout worker
SIGKILLed once a checkpoint exists (the way the OOM killer would), then the Docker engine under
its sandboxes restarted, then its learner's second rank SIGKILLed. The run replaces the
worker, its sandbox pool reconnects (the episodes that met the engine's gap end as
`env_error`, never trained), and the learner, both ranks, restarts from the last checkpoint,
all without a restart of the command, the groups finished at each fault kept (only the
episodes playing are lost); what the run leaves is whole: every step's
metrics once and in order, no sample trajectory twice, failed, or from a policy the restarted
learner never had, and a checkpoint at the last step. The Docker engine is a real dockerd of
the test's own (`_dockerd.PrivateEngine`), so the tests using the machine's engine meanwhile are
untouched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration import _dockerd
from tests.integration.trainer.test_train_cli import (
    _processes,
    _records,
    _start,
    _state,
    _trained_steps,
)

pytestmark = [pytest.mark.integration]

STEPS = 14
ARGS = [
    "--env", "code_exec", "--steps", str(STEPS), "env_kwargs.backend=docker",
    "rollout.n_samples_per_prompt=4", "rollout.concurrency=16", "rollout.max_turns=2",
    "rollout.max_reply_tokens=96",
    # Every group trains, even one whose scores are all equal: a run that stops on skipped
    # groups (run.max_skipped_groups) before its faults come would test nothing of them.
    "algorithm.batch_groups=2", "algorithm.max_staleness=1", "algorithm.filter_groups=false",
    "eval.every=0", "run.checkpoint_every=2", "run.save_trajectories=2", "run.wandb=disabled",
    # Two ranks, each learning a micro-batch of every step's 8 sequences.
    "ray.learner_ranks=2", "learner.micro_batch_size=4",
]  # fmt: skip


def _wait(run: subprocess.Popen[str], log: Path, what: str, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and run.poll() is None and not ready():
        time.sleep(0.5)
    assert ready(), f"waiting for {what}:\n{log.read_text()[-4000:]}"


def _ended(run: subprocess.Popen[str], log: Path) -> tuple[str, dict]:  # type: ignore[type-arg]
    """A finished run's output, once it is known to have succeeded, and its JSON summary."""
    output = log.read_text()
    assert run.returncode == 0, output[-6000:]
    summary = json.loads(next(ln for ln in reversed(output.splitlines()) if ln.startswith("{")))
    return output, summary


def _kill(out: Path, role: str, rank: int) -> int:
    """SIGKILL rank `rank` of the run's `role`, as the run's logs/processes.json names it."""
    pid = _processes(out)[role][rank]
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[_dockerd.PrivateEngine]:
    """The run's Docker engine, its own: the run (and Ray's actors, started from it) inherit
    `DOCKER_HOST`."""
    with _dockerd.private_engine() as engine:
        monkeypatch.setenv("DOCKER_HOST", engine.host)
        yield engine


@pytest.mark.timeout(1200)
def test_a_run_survives_losing_its_rollout_worker_and_a_learner_rank(
    tmp_path: Path, engine: _dockerd.PrivateEngine
) -> None:
    out, log = tmp_path / "run", tmp_path / "run.log"
    run = _start(out, log, *ARGS)
    injected: list[tuple[str, int]] = []
    try:
        with engine.restartable():
            _wait(
                run, log, "the first checkpoint", lambda: (out / "checkpoints/state.json").exists()
            )
            injected.append(("rollout worker", _kill(out, "rollout_workers", 0)))
            at = len(_trained_steps(out))
            _wait(run, log, "the worker's replacement", lambda: "replaced" in log.read_text())
            _wait(run, log, "a step after it", lambda: len(_trained_steps(out)) > at)
            assert engine.sandboxes_created(), "the run's sandboxes are on the engine restarted"
            engine.stop()
            engine.start()
            injected.append(("docker engine", 0))
            at = len(_trained_steps(out))
            _wait(run, log, "a step after the restart", lambda: len(_trained_steps(out)) > at)
            # The driver held still while the rank dies: a run at its last step cannot end
            # before it meets the fault.
            os.kill(run.pid, signal.SIGSTOP)
            try:
                assert len(_trained_steps(out)) < STEPS, "the run must still be going"
                before = _processes(out)["learner_ranks"]
                injected.append(("learner rank 1", _kill(out, "learner_ranks", 1)))
            finally:
                os.kill(run.pid, signal.SIGCONT)
            run.wait(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    output, summary = _ended(run, log)
    failed = sum(r.get("groups/failed", 0) for r in _records(out))
    print(
        f"faults injected: {injected}; the run's count: {summary['faults']}; {failed} groups failed"
    )
    assert summary["steps"] == STEPS and summary["stopped"] == f"reached max_steps={STEPS}"
    processes = [fault for fault in injected if fault[0] != "docker engine"]
    assert summary["faults"]["seen"] == summary["faults"]["survived"] == len(processes)
    assert "rollout worker 0 died" in output and "the learner died" in output
    assert "the learner restarts from step-" in output
    # What had finished when the learner died goes on to the restarted one: trained once, or
    # counted stale. Only episodes playing at a fault are lost.
    assert "finished episode(s) kept from before the learner died" in output
    assert summary["faults"]["episodes_kept"] > 0
    after = _processes(out)["learner_ranks"]
    assert len(after) == 2 and not set(after) & set(before), "both ranks restarted"

    steps = [r["step"] for r in _records(out) if "train/reward" in r]
    assert steps == list(range(1, STEPS + 1)), "every step's metrics once, in order"
    assert _state(out)["step"] == STEPS
    assert (out / "checkpoints" / _state(out)["tag"]).is_dir()

    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 2 * STEPS and len(set(lines)) == len(lines), "none trained twice"
    for i, line in enumerate(lines):
        step = i // 2 + 1
        trajectory = json.loads(line)
        assert trajectory["error"] is None, "an episode that failed is never trained"
        versions = trajectory["policy_versions"]
        # Sampled by a policy of this timeline: never newer than the weights the step had.
        assert max(versions) <= step - 1, (step, versions)
        assert versions == sorted(versions), "within an episode, versions only grow"
