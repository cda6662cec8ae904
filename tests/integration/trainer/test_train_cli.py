"""`agenthub train` end to end on the embedded default model: Ray actors, in-process vLLM
rollout workers, the DeepSpeed learner on gloo, the sandboxes behind code_exec. One short
run stops on a broken env, is resumed fixed, interrupted with Ctrl-C and resumed, killed with
SIGKILL and resumed again; the run directory is checked at every stage. Another trains with
two rollout workers and loses one inside a weight sync."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.smoke]

SMALL = [
    "rollout.n_samples_per_prompt=4",
    "rollout.concurrency=16",
    "rollout.max_turns=2",
    "rollout.max_reply_tokens=96",
    "algorithm.batch_groups=2",
    "algorithm.max_staleness=1",
    "eval.tasks=4",
    "eval.every=2",
    "run.checkpoint_every=2",
    "run.wandb=offline",
]


def _train(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "agenthub", "train", "--out", str(out), *args]


def _complete(out: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A run to its end, its output captured."""
    return subprocess.run(
        _train(out, *args), capture_output=True, text=True, timeout=800, env=_env(), cwd=cwd
    )


def _records(out: Path) -> list[dict]:  # type: ignore[type-arg]
    from agenthub.trainer._metrics import read_metrics

    return read_metrics(out / "metrics.jsonl")


def _trained_steps(out: Path) -> list[int]:
    if not (out / "metrics.jsonl").exists():
        return []
    return [r["step"] for r in _records(out) if "train/reward" in r]


def _state(out: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((out / "checkpoints" / "state.json").read_text())


def _env() -> dict[str, str]:
    # Ray started in this test process (the queue's, the simulation's) sets RAY_AUTH_MODE for
    # itself and its children; a run starts from a user's shell, which has none.
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    return {**env, "WANDB_SILENT": "true"}


def _start(out: Path, log: Path, *args: str) -> subprocess.Popen[str]:
    """A run in the background, its output in `log` (a pipe nobody reads would fill up)."""
    with log.open("w") as sink:
        return subprocess.Popen(
            _train(out, *args), stdout=sink, stderr=subprocess.STDOUT, text=True, env=_env()
        )


def _wait_until(run: subprocess.Popen[str], log: Path, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and run.poll() is None and not ready():
        time.sleep(0.5)
    assert run.poll() is None and ready(), log.read_text()[-4000:]


@pytest.mark.timeout(1500)
def test_train_is_interrupted_then_resumed_without_losing_state(tmp_path: Path) -> None:
    """A run whose env is broken stops with its error, before any step; fixed, it is resumed
    (from step 0) and interrupted with Ctrl-C; resumed again and killed with SIGKILL; and
    resumed to its end. One chain of runs, since each run's start costs a minute on CI."""
    out = tmp_path / "run"
    _broken_env_stops_the_run(out)
    log = tmp_path / "first.log"
    fixed = ["--resume", "--steps", "1000", *FIXED_ON_BWRAP, "eval.every=2"]
    run = _start(out, log, *fixed)
    try:
        _wait_until(run, log, lambda: len(_trained_steps(out)) >= 3)
        run.send_signal(signal.SIGINT)  # what Ctrl-C sends
        run.wait(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    output = log.read_text()
    assert run.returncode == 130, output[-4000:]
    assert "resume with: agenthub train" in output

    config = json.loads((out / "config.json").read_text())
    assert config["env"] == "code_exec" and config["algorithm"]["batch_groups"] == 2
    assert config["env_kwargs"] == {"backend": "bwrap"}, "the resume's overrides are kept"
    state = _state(out)
    steps = [r["step"] for r in _records(out) if "train/reward" in r]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3
    assert state["step"] == steps[-1], "Ctrl-C saved a checkpoint at the last step"
    assert (out / "checkpoints" / state["tag"]).is_dir()
    assert (out / "reward.png").read_bytes()[:4] == b"\x89PNG"
    assert list((out / "wandb").glob("offline-run-*")), "wandb logged offline"

    records = [r for r in _records(out) if "train/reward" in r]
    for r in records:
        assert r["staleness/max"] <= 1, "never trained on data older than max_staleness"
        assert 0.0 <= r["learner/idle_fraction"] <= 1.0
        assert r["groups/trained"] == 2
        assert 0.0 <= r["train/extra/pass_fraction"] <= 1.0, "the env's extra_logs are logged"
    assert all(r["learner/sync_s"] > 0 for r in records[2:]), "weight syncs are timed"
    evals = [r for r in _records(out) if "eval/reward" in r]
    assert evals[0]["step"] == 0 and evals[0]["eval/policy_version"] == 0
    assert all(r["eval/policy_version"] >= r["step"] for r in evals), "evaluated after the sync"
    samples = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert max(max(t["policy_versions"]) for t in samples) >= 1, "engines run synced weights"
    # What the stop keeps is what had finished untrained at that moment: on a quiet machine
    # the learner often waits for rollouts and nothing has (tests/unit/trainer/
    # test_kept_groups.py keeps groups at a stop deterministically); whatever was kept is
    # checked below to be trained first after the resume.
    kept = _kept_groups(out, state)

    # Resume, then kill -9 once a new checkpoint exists (the first after the resume, a step or
    # two on): nothing after it is kept.
    log = tmp_path / "resumed.log"
    resumed = _start(out, log, "--resume", "--steps", "1000")
    try:
        _wait_until(resumed, log, lambda: _state(out)["step"] > state["step"])
        killed_after = _state(out)
        resumed.kill()
        resumed.wait(timeout=60)
    finally:
        if resumed.poll() is None:
            resumed.kill()
    output = log.read_text()
    assert f"resumed from {state['tag']}" in output
    if kept:
        assert f"{4 * len(kept)} finished episode(s) kept from the checkpoint" in output
        _check_kept_groups_trained_first(out, state, kept)

    target = killed_after["step"] + 1  # the step the kill may have logged, redone once
    again = _complete(out, "--resume", "--steps", str(target))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resumed from {killed_after['tag']}" in again.stdout + again.stderr
    steps = [r["step"] for r in _records(out) if "train/reward" in r]
    assert steps == list(range(1, target + 1)), "steps after the last checkpoint were redone once"
    samples_file = (out / "trajectories.jsonl").read_text()
    assert samples_file.count("\n") == 4 * target, "run.save_trajectories=4 samples per step"
    lines = samples_file.splitlines()
    assert len(set(lines)) == len(lines), "no trajectory trained twice"
    after = _state(out)
    assert after["step"] == target
    assert after["tasks_drawn"][0] > killed_after["tasks_drawn"][0] > state["tasks_drawn"][0]
    summary = json.loads(again.stdout.strip().splitlines()[-1])  # Ray was shut down first
    assert summary["steps"] == target and summary["stopped"] == f"reached max_steps={target}"
    _check_exported_policy(out, after["tag"])


def _kept_groups(out: Path, state: dict) -> list[list[dict]]:  # type: ignore[type-arg]
    """The finished, untrained groups checkpoint `state` kept, as JSON."""
    path = out / "checkpoints" / state["tag"] / "groups.jsonl"
    groups = [json.loads(line) for line in path.read_text().splitlines()]
    assert state["groups"] == len(groups)
    return groups


def _check_kept_groups_trained_first(out: Path, state: dict, kept: list[list[dict]]) -> None:  # type: ignore[type-arg]
    """The step after the checkpoint trained its kept groups first, or counted the first one
    stale (sampled more than max_staleness=1 versions before the restored policy). Only the
    first group of a step is sampled into trajectories.jsonl (run.save_trajectories=4)."""
    step = state["step"] + 1
    record = next(r for r in _records(out) if r.get("step") == step and "train/reward" in r)
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    sampled = [json.loads(line) for line in lines[4 * (step - 1) : 4 * step]]
    fresh = [g for g in kept if state["step"] - min(min(t["policy_versions"]) for t in g) <= 1]
    if fresh:
        assert sampled == fresh[0], "the first kept group fresh enough is the next step's first"
    else:
        assert record["groups/stale"] >= 1, "kept groups too stale are counted so"


def _check_exported_policy(out: Path, tag: str) -> None:
    """`model/` is the policy of the last checkpoint as a Hugging Face model, and eval runs it."""
    import torch
    from safetensors.torch import load_file

    assert sorted(p.name for p in out.iterdir() if p.name.startswith("model")) == ["model"]
    assert json.loads((out / "model" / "agenthub_checkpoint.json").read_text())["tag"] == tag
    exported = load_file(out / "model" / "model.safetensors")
    # One learner rank saves its own state file; DeepSpeed's engines save *model_states.pt.
    [states] = list((out / "checkpoints" / tag).glob("*model_states.pt")) or [
        out / "checkpoints" / tag / "agenthub_single_rank.pt"
    ]
    trained = torch.load(states, map_location="cpu", weights_only=False)["module"]
    assert exported and all(torch.equal(v, trained[k]) for k, v in exported.items())
    result = subprocess.run(
        [sys.executable, "-m", "agenthub", "eval", "--env", "code_exec", "--model",
         str(out / "model"), "-n", "1", "--max-turns", "1", "--max-reply-tokens", "32",
         "--out", str(out.parent / "eval")],
        capture_output=True, text=True, timeout=600, env=_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out.parent / "eval" / "summary.json").read_text())["episodes"] == 1


def _killed(
    out: Path, log: Path, title: str, ready: Callable[[], bool], *args: str
) -> tuple[int, str]:
    """Start a run in `out` with `args`; once `ready()`, SIGKILL its process whose title (Ray
    names its actors' processes) has `title`, the way the OOM killer would. The run's exit
    status and output (kept in `log`)."""
    import psutil

    run = _start(out, log, *args)
    try:
        _wait_until(run, log, ready)
        victims = [
            p for p in psutil.Process(run.pid).children(recursive=True) if title in _title(p)
        ]
        assert victims, f"no {title} process under the run"
        victims[0].kill()
        run.wait(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    return run.returncode, log.read_text()


def _title(process: Any) -> str:
    import psutil

    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""  # gone meanwhile


@pytest.mark.timeout(1500)
def test_a_run_whose_worker_then_learner_dies_says_so_and_resumes_where_it_says(
    tmp_path: Path,
) -> None:
    """A rollout worker, then (in the resumed run) the learner, killed with no restart
    allowed (test_chaos.py has the run go on): each time the run exits 1 with Ray's word on
    which process died, no traceback, and the command that continues it from its checkpoint;
    a lost worker costs none of the learner's steps, and the resume goes on from them."""
    out = tmp_path / "run"
    args = ["--env", "code_exec", "--steps", "1000", *SMALL, "eval.every=0"]
    args += ["run.checkpoint_every=1000"]  # no periodic checkpoint
    args += ["run.max_worker_restarts=0"]  # none replaced
    returncode, output = _killed(
        out, tmp_path / "worker.log", "ray::RolloutWorker", lambda: len(_trained_steps(out)) >= 2,
        *args,
    )  # fmt: skip
    assert returncode == 1, output[-4000:]
    assert "class_name: RolloutWorker" in output
    steps = _trained_steps(out)
    assert _state(out)["step"] == steps[-1] >= 2, "checkpointed at the last step it logged"
    assert f"checkpointed at step {steps[-1]}: continue it with" in output
    assert "Traceback" not in output, "the failed weight sync into it is not news"

    # Resumed as that said, with overrides: a checkpoint every step, and no learner restart.
    resume = ["--resume", "run.checkpoint_every=1", "run.max_learner_restarts=0"]
    returncode, output = _killed(
        out, tmp_path / "learner.log", "ray::LearnerWorker",
        lambda: _state(out)["step"] > steps[-1], *resume,
    )  # fmt: skip
    assert json.loads((out / "config.json").read_text())["run"]["max_learner_restarts"] == 0
    assert returncode == 1, output[-4000:]
    assert "agenthub: error: The actor died" in output and "class_name: LearnerWorker" in output
    step = _state(out)["step"]
    assert f"checkpointed at step {step}: continue it with agenthub train --out {out} --resume" in (
        output
    )
    assert "Traceback" not in output, "Ray's message says it all; the driver's frames do not"

    # The worker's checkpoint resumed: the learner's steps went on from it, each once and in
    # order. (A resume run to its end: the Ctrl-C and broken-env tests above.)
    trained = _trained_steps(out)
    assert trained == list(range(1, len(trained) + 1)) and steps[-1] < step <= trained[-1]


@pytest.mark.timeout(600)  # a whole run, Ray's start and shutdown included
def test_a_run_that_fails_in_a_worker_says_where_to_go_on(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    # Passes the CLI's check (a model type and a tokenizer), fails to load in the workers.
    (model / "config.json").write_text('{"model_type": "no-such-architecture"}')
    (model / "tokenizer_config.json").write_text("{}")
    out = tmp_path / "run"
    failed = _complete(out, "--env", "math", "--model", str(model), "run.wandb=disabled")
    said = " ".join((failed.stdout + failed.stderr).split())  # the console wraps lines
    assert failed.returncode == 1, said[-3000:]
    assert "the run failed: RayTaskError(ValueError). It has no checkpoint yet:" in said
    # the worker's own error (its tokenizer loads first, then the engine would refuse the model)
    assert "Couldn't instantiate the backend tokenizer" in said, "the error itself is shown"
    assert "--resume starts it again from step 0" in said


def test_train_refuses_to_overwrite_or_resume_the_wrong_thing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text("")
    (out / "config.json").write_text(json.dumps({"env": "math"}))
    again = subprocess.run(
        _train(out, "--env", "math", "--steps", "1"), capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 1
    assert "already holds a training run; pass --resume" in again.stderr
    nothing = subprocess.run(
        _train(tmp_path / "none", "--resume"), capture_output=True, text=True, timeout=120
    )
    assert nothing.returncode == 1 and "holds no training run" in nothing.stderr
    other = subprocess.run(
        _train(out, "--resume", "--env", "code_exec"), capture_output=True, text=True, timeout=120
    )
    assert other.returncode == 1 and "trains env 'math'" in other.stderr


TWO_WORKERS = ["ray.rollout_workers=2", "run.checkpoint_every=3"]


LOCAL_ENV = """
from agenthub.envs.code_exec import CodeExecEnv


class LocalCodeExec(CodeExecEnv):
    \"\"\"code_exec, named by its module in the working directory: installed nowhere.\"\"\"

    async def reset(self, task, *, seed=None):
        print("a print in the env's reset")
        return await super().reset(task, seed=seed)
"""


LIBRARY_LINES = (
    "Token authentication is",  # Ray, in the driver's ray.init
    "Setting accelerator to CPU",  # DeepSpeed, at its import in the learner actor
    "doesn't include CPU backend",  # Triton without its CPU build, as vLLM imports it
)


@pytest.mark.timeout(900)
def test_two_rollout_workers_train_in_one_transfer_group_and_one_lost_in_a_sync_is_replaced(
    tmp_path: Path,
) -> None:
    """Each engine takes its own ranks after the learner's; a wrong layout fails or hangs the
    first broadcast. Both workers play, and their engines run synced weights. The env is a
    class in a module beside the person, which the Ray workers must find too.

    Rollout worker 1 is killed inside the weight sync of policy 2, held there by the test hook
    (`agenthub.trainer._test_hooks`) once its engine has the weights: the learner is between
    two calls of its round and worker 0's engine holds its requests in a round left open. The
    run replaces the worker, sends the weights to both engines again and reaches its steps.

    The terminal shows agenthub's own lines and what the env prints: what Ray, DeepSpeed, vLLM
    and Triton say at start-up (from the driver, the learner and rollout worker actors and the
    engine core) is in the run's `logs/libraries.log`, and only there."""
    (tmp_path / "local_envs.py").write_text(LOCAL_ENV)
    out = tmp_path / "run"
    env = ["--env", "local_envs:LocalCodeExec"]
    args = [*env, "--steps", "3", *SMALL, "eval.every=0", *TWO_WORKERS]
    done, before = _killed_in_sync(out, tmp_path, rank=1, version=2, args=args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _trained_steps(out) == [1, 2, 3], "every step once, in order"
    records = [r for r in _records(out) if "train/reward" in r]
    assert all(r["learner/sync_s"] > 0 for r in records[1:]), "weight syncs are timed"
    state = _state(out)
    assert len(state["tasks_drawn"]) == 2 and min(state["tasks_drawn"]) > 0, state
    samples = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert max(max(t["policy_versions"]) for t in samples) >= 1, "engines run synced weights"
    # What the run's processes print goes to stderr: stdout is the JSON summary alone.
    assert "a print in the env's reset" in done.stderr
    summary = json.loads(done.stdout)
    assert summary["steps"] == 3, done.stdout[-3000:]
    # The worker lost in the sync was replaced, said so, and the run went on with two.
    assert summary["faults"]["seen"] == summary["faults"]["survived"] == 1, summary
    assert summary["rollout_workers"] == 2
    said = " ".join(done.stderr.split())  # the console wraps lines
    assert "rollout worker 1 died (" in said and "replacing it" in said, said[-4000:]
    assert "rollout worker 1 replaced, its engine at policy version" in said
    assert "in flight lost, the run goes on" in said
    after = _processes(out)["rollout_workers"]
    assert after[0] == before[0] and after[1] != before[1], "a new process holds rank 1 only"
    terminal = done.stdout + done.stderr
    for line in LIBRARY_LINES:
        assert line not in terminal, f"{line!r} reached the terminal:\n{done.stderr[-4000:]}"
    log = (out / "logs" / "libraries.log").read_text()
    for line in LIBRARY_LINES:
        assert line in log, f"{line!r} is not in the library log:\n{log[-4000:]}"


def _killed_in_sync(
    out: Path, cwd: Path, rank: int, version: int, args: list[str]
) -> tuple[subprocess.CompletedProcess[str], list[int]]:
    """A run in `out` with `args` (from `cwd`) to its end, rollout worker `rank` killed with
    SIGKILL inside the weight sync of policy `version`, where the test hook holds it; the run's
    output, and its rollout workers' process ids then."""
    import psutil

    from agenthub.trainer._test_hooks import HOLD_IN_SYNC

    held, stdout, stderr = cwd / "held-in-sync", cwd / "stdout", cwd / "stderr"
    env = {**_env(), HOLD_IN_SYNC: f"{rank}:{version}:{held}"}
    with stdout.open("w") as out_sink, stderr.open("w") as err_sink:
        run = subprocess.Popen(
            _train(out, *args), stdout=out_sink, stderr=err_sink, text=True, env=env, cwd=cwd
        )
    try:
        _wait_until(run, stderr, held.exists)  # the hook holds the worker in the sync now
        worker = psutil.Process(int(held.read_text()))
        pids = _processes(out)["rollout_workers"]
        assert "ray::RolloutWorker" in _title(worker) and worker.pid == pids[rank]
        worker.kill()
        run.wait(timeout=800)
    finally:
        if run.poll() is None:
            run.kill()
    done = subprocess.CompletedProcess(
        run.args, run.returncode, stdout.read_text(), stderr.read_text()
    )
    return done, pids


def _processes(out: Path) -> dict[str, list[int]]:
    """The run's process ids by role ("learner_ranks", "rollout_workers"), in rank order, as
    its logs/processes.json names them."""
    processes: dict[str, list[int]] = json.loads((out / "logs" / "processes.json").read_text())
    return processes


BROKEN = ["rollout.env_step_timeout_s=0.001", "run.max_failed_groups=3"]
# The fix, and on the bubblewrap sandbox: Ray's default event loop (uvloop) could not start its
# programs, so every episode failed there too.
FIXED_ON_BWRAP = ["rollout.env_step_timeout_s=60", "env_kwargs.backend=bwrap"]


def _broken_env_stops_the_run(out: Path) -> None:
    """A run in `out` whose every episode fails stops with its error and says how to go on.
    (Every episode failing used to leave the run waiting for a usable group forever, with
    nothing on the screen but "starting".)"""
    broken = _complete(out, "--env", "code_exec", "--steps", "2", *SMALL, "eval.every=0", *BROKEN)
    assert broken.returncode == 1, broken.stdout[-3000:] + broken.stderr[-3000:]
    # Groups come off the queue up to two at a time, so the count may pass the limit of 3.
    said = re.search(
        r"the last (\d+) groups of episodes all ended in errors \((.*?)\)", broken.stderr
    )
    assert said is not None, broken.stderr[-3000:]
    assert int(said[1]) in (3, 4) and said[2] == f"env_timeout x{4 * int(said[1])}", said[0]
    assert "step took longer than 0.001 s" in broken.stderr
    assert f"agenthub train --out {out} --resume" in broken.stderr
    assert _state(out)["step"] == 0
