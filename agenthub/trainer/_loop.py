"""The training loop: rollout workers and the learner on Ray, joined by a bounded queue.

Rollout workers play episodes continuously and push finished groups into the queue, admitted
no further ahead of the learner than `max_staleness` policy versions. The driver (this module)
takes groups off the queue, drops the stale, failed and signal-free ones, computes advantages,
hands the batch to the learner actor, and sends the new weights to every engine under the next
policy version while the learner goes on. With `max_staleness = 0` the same loop is
synchronous: rollouts wait for each step's weights.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import math
import os
import shutil
import signal
import socket
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agenthub._errors import AgentHubError
from agenthub._tracebacks import described
from agenthub.agents import Trajectory
from agenthub.agents._trajectory import mean_extra_logs
from agenthub.trainer._config import AlgorithmConfig, TrainConfig
from agenthub.trainer._learner import MODEL_CHECKPOINT
from agenthub.trainer._metrics import MetricsLog, read_metrics

if TYPE_CHECKING:
    from agenthub.agents.default_model import BuildProgress

__all__ = ["RunDirectory", "StepReport", "Trainer", "triage"]

STATE = "state.json"
CONFIG = "config.json"
CHECKPOINTS = "checkpoints"
_logger = logging.getLogger("agenthub.train")

MODEL = "model"  # the policy as a Hugging Face model, written with each checkpoint
SAMPLES = "trajectories.jsonl"  # trajectories of each step, `run.save_trajectories` of them


class RunDirectory:
    """The files of one run: `config.json`, `metrics.jsonl`, `trajectories.jsonl` samples,
    `checkpoints/` (DeepSpeed's, plus `state.json` naming the newest complete one),
    `model/` (the policy at the newest checkpoint, as a Hugging Face model) and `reward.png`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.checkpoints = path / CHECKPOINTS

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory for one run: a second run on it (a `--resume` while the first
        still trains) would interleave both runs' logs and checkpoints. The lock is the
        directory's own (flock), so no file is left behind and a killed run holds none."""
        created = not self.path.exists()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise AgentHubError(
                f"cannot create the run directory {self.path} ({exc.strerror}); choose another "
                "--out"
            ) from None
        held = False
        try:
            if not os.access(self.path, os.W_OK):
                raise AgentHubError(f"cannot write to {self.path}; choose another --out")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
            except BlockingIOError:
                raise AgentHubError(
                    f"{self.path} is in use by another agenthub train run; wait for it to end "
                    "(or stop it), or choose another --out"
                ) from None
            except OSError as exc:  # NFS refuses flock on a directory; Lustre, FUSE may too
                _logger.warning(
                    "agenthub train: cannot lock %s (%s); nothing stops a second run there",
                    self.path,
                    exc.strerror,
                )
            yield
        finally:
            # Only the run that made the directory and held it removes it, and while it holds
            # it: a refused run must not remove the directory of the run that refused it.
            if created and held and not any(self.path.iterdir()):
                self.path.rmdir()  # a run stopped before it wrote anything leaves nothing
            os.close(fd)

    def saved_config(self) -> dict[str, Any] | None:
        """The run's config.json, None without one; `AgentHubError` for one that is not a
        training run's (a model directory's, say)."""
        file = self.path / CONFIG
        if not file.exists():
            return None
        try:
            config = json.loads(file.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise AgentHubError(f"{file} is not JSON ({exc}); {self.path} holds no run") from None
        if not isinstance(config, dict) or "env" not in config:
            raise AgentHubError(
                f"{file} is not a training run's config (a model directory?); give --out a "
                "directory of agenthub train's own"
            )
        return config

    def checked_state(self) -> dict[str, Any] | None:
        """`state()`, refusing a run directory whose checkpoints do not match it: checkpoints
        without the state.json that names the newest complete one, or a newest one gone."""
        state = self.state()
        saved = sorted(p.name for p in self.checkpoints.glob("step-*") if p.is_dir())
        # One checkpoint without a state.json is a first one cut off while it was written
        # (state.json is written last); two mean that state.json was lost.
        if state is None and len(saved) > 1:
            raise AgentHubError(
                f"{self.checkpoints} holds checkpoints ({', '.join(saved)}) but no {STATE}, "
                "which names the newest complete one; put it back, or move checkpoints/ "
                "away to start the run again from step 0"
            )
        if state is not None and state["tag"] not in saved:
            older = [tag for tag in state.get("history", []) if tag in saved]
            also = f" ({', '.join(older)} remain)" if older else ""
            raise AgentHubError(
                f"{self.checkpoints / state['tag']}, the newest checkpoint {STATE} names, is "
                f"gone{also}; restore it, or move checkpoints/ away to start again from step 0"
            )
        return state

    def state(self) -> dict[str, Any] | None:
        file = self.checkpoints / STATE
        return json.loads(file.read_text(encoding="utf-8")) if file.exists() else None

    def checkpointed_step(self) -> int:
        """The step of the newest complete checkpoint; 0 before the first."""
        state = self.state()
        return int(state["step"]) if state else 0

    def write_config(self, config: TrainConfig) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.path / CONFIG, config.model_dump_json(indent=2) + "\n")

    def samples_size(self) -> int:
        """Bytes in trajectories.jsonl: a checkpoint records it, to rewind the file to."""
        path = self.path / SAMPLES
        return path.stat().st_size if path.exists() else 0

    def rewind_logs(self, state: dict[str, Any]) -> None:
        """Forget what was logged after the checkpoint `state` names (a run killed between
        checkpoints logged steps it will take again when resumed): metrics of later steps, and
        sample trajectories written after it (their size then, in checkpoints of this version;
        older ones did not record it, and their samples stay)."""
        path = self.path / "metrics.jsonl"
        if path.exists():
            kept = [r for r in read_metrics(path) if r.get("step", 0) <= int(state["step"])]
            _write_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
        size = state.get("samples_bytes")
        if size is not None and self.samples_size() > size:
            with (self.path / SAMPLES).open("r+b") as samples:
                samples.truncate(size)

    def discard_logs(self) -> None:
        """Delete what the run logged (metrics, sample trajectories, the reward plot, its wandb
        run's id), for a run that starts again from step 0."""
        for name in ("metrics.jsonl", SAMPLES, "reward.png", "wandb_run_id"):
            (self.path / name).unlink(missing_ok=True)

    def exported_step(self) -> int | None:
        """The step of the policy in `model/`, None if there is none (or it says not)."""
        try:
            about = json.loads((self.path / MODEL / MODEL_CHECKPOINT).read_text(encoding="utf-8"))
            return int(about["step"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write_state(self, state: dict[str, Any], keep: int) -> None:
        """Record a complete checkpoint as the newest, then delete all but the `keep` newest."""
        history = [*(self.state() or {}).get("history", []), state["tag"]]
        state = {**state, "history": history[-keep:]}
        _write_atomic(self.checkpoints / STATE, json.dumps(state, indent=2) + "\n")
        for old in history[:-keep]:
            shutil.rmtree(self.checkpoints / old, ignore_errors=True)


_OUTPUT_TO_STDERR = "agenthub.trainer._workers.output_to_stderr"
"""Ray's set-up hook for every process of the run (a name: Ray imports it there)."""

_CHECKPOINT_BOUND = ("model", "learner.zero_stage", "learner.bf16", "ray.rollout_workers")
"""Settings a checkpoint is written for: DeepSpeed loads its states only into the same model,
ZeRO stage and precision, and each rollout worker keeps its own place in the tasks."""


def _keep_what_the_checkpoint_needs(
    run: Path, saved: dict[str, Any], state: dict[str, Any], config: TrainConfig
) -> None:
    """Refuse, before anything starts, a resume that changes what its checkpoint depends on
    (it would fail in DeepSpeed's loader half a minute later). Precision is compared as the
    learner resolved it (`bf16` in the state; `learner.bf16=null` means by the device), once
    the learner has started, in checkpoints that record it."""
    new = config.model_dump(mode="json")
    bound = [k for k in _CHECKPOINT_BOUND if not (k == "learner.bf16" and "bf16" in state)]
    changed = [key for key in bound if _dotted(saved, key) != _dotted(new, key)]
    estimator = _dotted(saved, "algorithm.estimator")
    if (estimator == "gae") != (config.algorithm.estimator == "gae"):  # a critic, or none
        changed.append("algorithm.estimator")
    if changed:
        was = ", ".join(f"{key}={json.dumps(_dotted(saved, key))}" for key in changed)
        raise AgentHubError(
            f"--resume: the checkpoints in {run} were written with {was}, which they need to "
            "load; resume with the same (drop the change), or start a new run with another --out"
        )


def _join_ray(address: str, options: dict[str, Any]) -> None:
    """`ray.init(address=...)`, failing with what to do: Ray itself retries an address that
    does not answer for minutes, and names its own flags when `auto` finds no cluster."""
    import ray

    hint = (
        "start the cluster's head with `ray start --head` (its address is printed), or leave "
        "out --ray-address (ray.address) to train on this machine alone"
    )
    host, colon, port = address.rpartition(":")
    if colon and port.isdigit() and "://" not in address:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
        except OSError as exc:
            raise AgentHubError(f"no Ray cluster answers at {address} ({exc}); {hint}") from None
    try:
        ray.init(address=address, **options)
    except ConnectionError as exc:
        raise AgentHubError(f"could not join a Ray cluster at {address} ({exc}); {hint}") from None


def _disk_full(path: Path, below: int = 256 << 20) -> str | None:
    """What to say when the disk holding `path` has less than `below` bytes free (a
    checkpoint is the model's weights and optimizer states): None when it has more."""
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return None
    if free >= below:
        return None
    return (
        f"the disk holding {path} is full ({free >> 20} MB free); free space there and resume "
        f"with agenthub train --out {path} --resume"
    )


def _dotted(tree: dict[str, Any], key: str) -> Any:
    value: Any = tree
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


@dataclass
class StepReport:
    """What the progress display shows after each learner step."""

    step: int
    max_steps: int
    reward: float
    tokens_per_s: float
    staleness: float
    queue_depth: int
    idle_fraction: float
    eval_reward: float | None = None


@dataclass
class _Batch:
    groups: list[list[Trajectory]] = field(default_factory=list)
    seen: list[list[Trajectory]] = field(default_factory=list)
    wait_s: float = 0.0
    stale: int = 0
    failed: int = 0
    filtered: int = 0
    errors: Counter[str] = field(default_factory=Counter)


def _actor(cls: type, **options: Any) -> Any:
    """`cls` as a Ray actor class with `options` (typed loosely: Ray's stubs do not follow
    methods through `.remote`)."""
    import ray

    return ray.remote(cls).options(**options)


def _worker_env(cfg: TrainConfig) -> dict[str, str]:
    """Environment of a rollout worker: its engine's CPU threads, vLLM's chatter (start-up,
    and a warning at every weight sync that rotary embeddings have no weights to load) kept
    out of the run's output unless the user asks for it with VLLM_LOGGING_LEVEL, and asyncio's
    own event loop, which environments run on everywhere else (`agenthub eval`, the REPL,
    `check_env`), so an env trains on the loop it was checked on. Ray's default, uvloop,
    refuses some of what asyncio takes (`open_process(user=...)`, which the bwrap sandbox
    once used, so every code_exec episode failed there)."""
    return {
        "OMP_NUM_THREADS": str(cfg.ray.worker_threads),
        "VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"),
        "RAY_USE_UVLOOP": "0",
    }


def _cancel(refs: list[Any]) -> None:
    import ray

    for ref in refs:
        ray.cancel(ref)


async def _check_env(cfg: TrainConfig) -> None:
    """Build the env and read through each split as far as the run reads it (the first 10,000
    training tasks, the `eval.tasks` held-out ones), here in the driver: a wrong id, argument or
    a bad line in a task file then fails in a second with its own message, before Ray starts or
    anything is written, instead of as a traceback from inside a rollout worker, perhaps an hour
    in (held-out evaluation reading the bad line). What the env prints meanwhile goes to
    stderr, as it does from the run's other processes: stdout is the summary's."""
    from agenthub._errors import EnvArgumentsError
    from agenthub._registry import make
    from agenthub._returns import READ_AHEAD, READ_AHEAD_S, read_ahead
    from agenthub._tracebacks import raised

    readers = {"train": ("training", READ_AHEAD)}
    if cfg.eval.every:
        reader = f"held-out evaluation (eval.every={cfg.eval.every})"
        readers.setdefault(cfg.eval.split, (reader, cfg.eval.tasks))
    with _stdout_to_stderr():
        try:
            env = make(cfg.env, **cfg.env_kwargs)
        except EnvArgumentsError as exc:
            raise AgentHubError(f"{exc}; the run gives them as env_kwargs.NAME=VALUE") from exc
        try:
            for split, (reader, limit) in readers.items():
                try:
                    if read_ahead(env.tasks(split), READ_AHEAD_S, limit) == 0:
                        raise AgentHubError(f"environment {cfg.env!r} gives no {split!r} tasks")
                except Exception as exc:
                    hint = "" if split == "train" else "; or set eval.every=0"
                    what = str(exc).rstrip(".")
                    if not isinstance(exc, AgentHubError | ValueError | OSError):
                        # the env's own bug: say what it raised, and where
                        what = raised(f"the env's tasks({split!r})", exc)
                    message = f"{reader} reads split {split!r}: {what}{hint}"
                    raise AgentHubError(message) from exc
        finally:
            await env.aclose()


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Inside, what is printed to stdout goes to stderr: Python's prints and, through the file
    descriptor, those of subprocesses and native code."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no file descriptors 1 and 2 to speak of (a daemon): Python's alone
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _min_version(group: list[Trajectory]) -> int:
    return min((min(t.policy_versions) for t in group if t.policy_versions), default=0)


Verdict = Literal["keep", "stale", "failed", "filtered"]


class _FailedGroups:
    """The groups with an episode in error since the last group without one: how many, the
    causes of their errors, and the last error."""

    def __init__(self) -> None:
        self.in_a_row = 0
        self.causes: Counter[str] = Counter()
        self.example = ""

    def add(self, group: list[Trajectory]) -> None:
        errors = [t.error for t in group if t.error is not None]
        if not errors:
            self.in_a_row = 0
            self.causes.clear()
            return
        self.in_a_row += 1
        self.causes.update(e.cause for e in errors)
        self.example = f"{errors[-1].cause}: {errors[-1].message}"

    def error(self, cfg: TrainConfig, out: Path, step: int) -> AgentHubError:
        causes = ", ".join(f"{cause} x{n}" for cause, n in self.causes.most_common())
        return AgentHubError(
            f"the last {self.in_a_row} groups of episodes all ended in errors ({causes}), so "
            f"there was nothing to train on; the last one: {self.example[:500]}. Try the "
            f"environment by hand (agenthub repl --env {cfg.env}) or with "
            "agenthub.testing.check_env. The run is checkpointed at step "
            f"{step}: continue it with agenthub train --out {out} --resume "
            f"(run.max_failed_groups={cfg.run.max_failed_groups} sets how many failed groups "
            "in a row stop a run)"
        )


def triage(group: list[Trajectory], version: int, algo: AlgorithmConfig) -> Verdict:
    """What the learner at policy `version` does with a finished group.

    `stale`: some token was sampled more than `max_staleness` versions ago; `failed`: an
    episode ended in an error (its reward means nothing); `filtered`: dynamic filtering found
    no signal (all scores equal) or a mean score outside [filter_low, filter_high]; else `keep`.
    """
    from agenthub.trainer._advantages import filter_groups

    if version - _min_version(group) > algo.max_staleness:
        return "stale"
    if any(t.error is not None for t in group):
        return "failed"
    if algo.filter_groups:
        low, high = algo.filter_low, algo.filter_high
        keep = filter_groups(
            [t.success_score for t in group],
            len(group),
            -math.inf if low is None else low,
            math.inf if high is None else high,
        )
        if not bool(keep.all()):
            return "filtered"
    return "keep"


def _evaluated(step: int, result: dict[str, Any], versions: str) -> str:
    """The log line of a held-out evaluation: its reward, and its failed episodes' causes
    (with every episode failed there is no reward to give, only the errors)."""
    errors, episodes = result["errors"], result["episodes"]
    failed = ""
    if errors:
        causes = ", ".join(f"{c} x{n}" for c, n in Counter(result["error_causes"]).most_common())
        failed = f"{errors} of {episodes} episodes ended in errors ({causes}; the last: "
        failed += f"{result['last_error'][:300]})"
    if errors == episodes:
        return f"held-out evaluation at step {step}: {failed or 'no episodes'}"
    return (
        f"held-out reward {result['reward']:.3f} at step {step} "
        f"({episodes} episodes, policy version{versions})" + (f"; {failed}" if failed else "")
    )


class _NoSignal:
    """The groups dynamic filtering dropped since the last group kept. A model whose reward
    never varies on an env (every reply wrong, say) gives no step at all, which looks like a
    hang; the run says so when the count reaches 4 batches, then 8, 16, ..."""

    def __init__(self, algo: AlgorithmConfig, limit: int | None = None) -> None:
        self.algo = algo
        self.limit = limit or 32 * algo.batch_groups
        """How many skipped groups in a row stop the run (`run.max_skipped_groups`)."""
        self.kinds: Counter[str] = Counter()
        self._restart()

    def _restart(self) -> None:
        self.in_a_row = 0
        self.kinds.clear()
        self.notice_at = 4 * self.algo.batch_groups

    def add(self, group: list[Trajectory], verdict: Verdict) -> str | None:
        """Count `group`; what to tell the user, when it is time to."""
        if verdict == "keep":
            self._restart()
            return None
        if verdict != "filtered":
            return None
        self.in_a_row += 1
        scores = [t.success_score for t in group]
        if min(scores) == max(scores):
            self.kinds[f"all {scores[0]:g}"] += 1
        else:
            self.kinds[f"mean {sum(scores) / len(scores):.2g}"] += 1
        if self.in_a_row < self.notice_at or self.in_a_row >= self.limit:
            return None  # not yet, or the run stops on it
        self.notice_at *= 2
        return self._why()

    def _why(self) -> str:
        seen = ", ".join(f"{kind} in {n}" for kind, n in self.kinds.most_common(4))
        bounds = ""
        if self.algo.filter_low is not None or self.algo.filter_high is not None:
            bounds = (
                f", or a mean score outside algorithm.filter_low={self.algo.filter_low} .. "
                f"filter_high={self.algo.filter_high}"
            )
        return (
            f"the last {self.in_a_row} groups gave nothing to train on, so no step came of "
            f"them: every episode of a group scored the same{bounds} (scores: {seen}). A "
            "group of equal scores has no signal; if the model never does better or worse on "
            "these tasks, give it easier ones or partial credit (try agenthub eval on the "
            "env). algorithm.filter_groups=false trains on such groups, which moves the policy "
            "only under an estimator without a group baseline (reinforce)"
        )

    def error(self, out: Path, step: int) -> AgentHubError:
        return AgentHubError(
            f"{self._why()}. Without a step the policy cannot change, so the run stopped "
            f"rather than wait on more of the same; it is checkpointed at step {step}: "
            f"continue it with agenthub train --out {out} --resume once the env or the model "
            f"has changed (run.max_skipped_groups={self.limit} sets how many skipped "
            "groups in a row stop a run)"
        )


class Trainer:
    """One training run. `run()` trains until `max_steps`, `max_minutes` or `stop()`, saving a
    checkpoint whenever it stops; a later `Trainer` on the same directory with `resume=True`
    continues from that checkpoint with the learner's optimizer state, the policy version and
    the position in each worker's task stream."""

    def __init__(
        self,
        config: TrainConfig,
        out: Path,
        *,
        resume: bool = False,
        on_step: Callable[[StepReport], None] | None = None,
        log: Callable[[str], None] = print,
        build_progress: BuildProgress | None = None,
    ) -> None:
        self.config = config
        self.dir = RunDirectory(out)
        self.resume = resume
        self.on_step = on_step
        self.log = log
        self.build_progress = build_progress  # shows the default model's first build
        self._stop = asyncio.Event()
        self.stop_reason = ""
        self._sync_s = 0.0  # how long the last finished weight sync took
        self._pending_sync: asyncio.Task[None] | None = None
        self._failed = _FailedGroups()
        self._no_signal = _NoSignal(config.algorithm, config.run.max_skipped_groups)
        self._failure: AgentHubError | None = None  # raised once the run is checkpointed
        self._set_up = False  # the run directory holds this run (--resume can find it)

    def stop(self, reason: str = "stopped") -> None:
        """Ask the run to stop after the step in progress (safe from a signal handler)."""
        self.stop_reason = self.stop_reason or reason
        self._stop.set()

    # -- setup ---------------------------------------------------------------------------

    def _prepare_directory(self) -> dict[str, Any] | None:
        saved = self.dir.saved_config()  # a directory not a run's is refused, not overwritten
        state = self.dir.checked_state()
        if self.resume and state is not None and saved is not None:
            _keep_what_the_checkpoint_needs(self.dir.path, saved, state, self.config)
        if self.resume and state is None:
            # Stopped before its first checkpoint (killed, or Ctrl-C twice): the start is the
            # last state it can go back to, so it starts again in the same directory.
            self.log(
                f"{self.dir.path} has no checkpoint yet (the run stopped before its first one); "
                "starting it again from step 0"
            )
            self.dir.discard_logs()
            shutil.rmtree(self.dir.checkpoints, ignore_errors=True)  # a first one cut off
        elif not self.resume and (state is not None or (self.dir.path / "metrics.jsonl").exists()):
            raise AgentHubError(
                f"{self.dir.path} already holds a training run; pass --resume to continue it, "
                "or choose another --out"
            )
        if state is not None:
            self.dir.rewind_logs(state)
            # The run's starting evaluation and its last so far, for the summary: a resumed
            # run does not evaluate again before it trains on.
            for record in read_metrics(self.dir.path / "metrics.jsonl"):
                if "eval/errors" in record:  # a NaN reward (every episode failed) is not logged
                    self._evaluated(record.get("eval/reward"))
        else:  # a resumed run's config is saved once its checkpoint has loaded
            self.dir.write_config(self.config)
        return state

    def _start_ray(self) -> None:
        import ray

        if ray.is_initialized():
            return
        options: dict[str, Any] = {
            "include_dashboard": False,
            "logging_level": "WARNING",
            "log_to_driver": True,
            # The run's stdout is its JSON summary; its processes print to stderr.
            "runtime_env": {"worker_process_setup_hook": _OUTPUT_TO_STDERR},
        }
        if self.config.ray.address:
            _join_ray(self.config.ray.address, options)
        else:
            # Ray runs its workers at niceness 15 by default; here they are the job itself,
            # and would lose their cores to anything else on the machine.
            os.environ.setdefault("RAY_worker_niceness", "0")
            cpus = max(os.cpu_count() or 1, self.config.ray.rollout_workers + 1)
            # Ray's processes (and the actors' and engines' under them) share this terminal's
            # process group: with SIGHUP blocked they inherit, a hang-up stops the run through
            # its handler, with a checkpoint, rather than killing the cluster under it.
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
            try:
                ray.init(num_cpus=cpus, **options)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            # Ray waits forever for GPUs a machine lacks; on a cluster they may yet join.
            r = self.config.ray
            wanted = r.learner_num_gpus + r.rollout_workers * r.worker_num_gpus
            have = float(ray.cluster_resources().get("GPU", 0.0))  # type: ignore[no-untyped-call]
            if wanted > have:
                raise AgentHubError(
                    f"the run asks for {wanted:g} GPUs (ray.learner_num_gpus="
                    f"{r.learner_num_gpus:g}, ray.worker_num_gpus={r.worker_num_gpus:g} per "
                    f"rollout worker) and this machine has {have:g}; set them to what it has "
                    "(0 trains on the CPU), or join a cluster with --ray-address"
                )

    # -- the run -------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Train; returns a summary (steps, stop reason, last rewards). Ray, when this run
        started it, is shut down before returning, so no late worker output follows."""
        import ray

        owns_ray = not ray.is_initialized()
        try:
            with self.dir.locked():
                return asyncio.run(self._main())
        except KeyboardInterrupt:
            if self._set_up:  # Ctrl-C twice: what was trained since the last checkpoint is gone
                self.log(f"quit without saving. {self._how_to_go_on()}")
            raise
        except ray.exceptions.RayActorError as exc:
            # A process of the run died (the OOM killer, a crash in native code): Ray's message
            # says which and why; the driver's traceback adds nothing.
            raise AgentHubError(f"{exc}\n{self._how_to_go_on()}") from exc
        except Exception as exc:
            # Errors raised on purpose in the driver say what to do; any other, once the run
            # directory is set up, is told where the run can go on from.
            if self._set_up and (
                not isinstance(exc, AgentHubError) or isinstance(exc, ray.exceptions.RayError)
            ):
                self.log(f"the run failed: {type(exc).__name__}. {self._how_to_go_on()}")
            full = None if isinstance(exc, AgentHubError) else _disk_full(self.dir.path)
            if full is not None:  # writers fail in their own words (torch: "unexpected pos")
                raise AgentHubError(f"{full}; {described(exc)}") from exc
            raise
        finally:
            if owns_ray and ray.is_initialized():
                ray.shutdown()

    def _how_to_go_on(self) -> str:
        command = f"agenthub train --out {self.dir.path} --resume"
        try:
            state = self.dir.state()
        except (OSError, ValueError):
            return f"Continue it with {command}"
        if state is None:
            return f"It has no checkpoint yet: {command} starts it again from step 0"
        return f"It is checkpointed at step {state['step']}: continue it with {command}"

    async def _main(self) -> dict[str, Any]:
        import ray

        from agenthub.agents._engines import resolve_model
        from agenthub.trainer._queue import TrajectoryQueue
        from agenthub.trainer._workers import Admission, LearnerWorker, RolloutWorker

        cfg = self.config
        await _check_env(cfg)
        state = self._prepare_directory()
        self._set_up = True
        model_path = resolve_model(cfg.model, needed=True, progress=self.build_progress)
        assert model_path is not None
        self._start_ray()
        loop = asyncio.get_running_loop()
        with _interruptible(loop, self):
            step = int(state["step"]) if state else 0
            tasks_done = list(state["tasks_drawn"]) if state else [0] * cfg.ray.rollout_workers
            elapsed_before = float(state["elapsed_s"]) if state else 0.0
            if len(tasks_done) != cfg.ray.rollout_workers:
                raise AgentHubError(
                    f"the checkpoint has {len(tasks_done)} rollout workers' task positions but "
                    f"the config asks for {cfg.ray.rollout_workers}; resume with "
                    f"ray.rollout_workers={len(tasks_done)}"
                )
            config_dict = cfg.model_dump(mode="json")
            B = cfg.algorithm.batch_groups
            queue: TrajectoryQueue[list[Trajectory]] = TrajectoryQueue(
                (cfg.algorithm.max_staleness + 2) * B, actor_options={"num_cpus": 0}
            )
            admission = _actor(Admission, num_cpus=0, max_concurrency=10_000).remote(
                B, cfg.algorithm.max_staleness, step
            )
            learner = _actor(LearnerWorker, num_cpus=1, num_gpus=cfg.ray.learner_num_gpus).remote(
                config_dict, str(model_path)
            )
            workers = [
                _actor(
                    RolloutWorker,
                    num_cpus=1,
                    num_gpus=cfg.ray.worker_num_gpus,
                    max_concurrency=10_000,
                    runtime_env={"env_vars": _worker_env(cfg)},
                ).remote(config_dict, str(model_path), rank, queue, admission, tasks_done[rank])
                for rank in range(cfg.ray.rollout_workers)
            ]
            metrics = MetricsLog(
                self.dir.path,
                title=f"agenthub train --env {cfg.env}",
                wandb=cfg.run.wandb,
                config=config_dict,
                resume=self.resume,
            )
            self._learner, self._workers, self._admission, self._queue = (
                learner,
                workers,
                admission,
                queue,
            )
            self._metrics = metrics
            running: list[Any] = []
            started = False
            try:
                self.log(f"starting {len(workers)} rollout worker(s) and the learner")
                if not await self._unless_stopped(
                    asyncio.gather(*(w.start.remote() for w in workers))
                ):
                    return self._summary(step, elapsed_before)
                started = True
                ranks = await asyncio.gather(*(w.weight_transfer_ranks.remote() for w in workers))
                await learner.open_weight_sync.remote(workers, list(ranks))
                self._bf16 = await learner.uses_bf16.remote()
                if state is not None:
                    self._check_precision(state)
                    steps = await learner.load_checkpoint.remote(
                        str(self.dir.checkpoints), state["tag"]
                    )
                    if steps != step:
                        raise AgentHubError(
                            f"checkpoint {state['tag']} holds {steps} learner steps, state.json "
                            f"says {step}; the checkpoint directory is inconsistent"
                        )
                    self.dir.write_config(cfg)
                    await self._export_again(state)
                    await self._sync(step)
                    self.log(f"resumed from {state['tag']} (policy version {step})")
                elif cfg.eval.every:
                    self.log("evaluating the starting policy on held-out tasks")
                    if not await self._unless_stopped(self._evaluate(0)):
                        return self._summary(step, elapsed_before)
                running = [w.run.remote() for w in workers]
                return await self._loop(step, elapsed_before, running)
            finally:
                _cancel(running)
                if started:  # else a worker may be inside vLLM's start-up, which nothing cuts
                    await asyncio.gather(
                        *(w.close.remote() for w in workers), return_exceptions=True
                    )
                metrics.close()
                queue.shutdown()
                for actor in [learner, admission, *workers]:
                    ray.kill(actor)

    async def _unless_stopped(self, work: Awaitable[Any]) -> bool:
        """Await `work` unless the run is stopped first (Ctrl-C while the engines start or the
        starting policy is evaluated: a minute's wait otherwise); False then, `work` dropped."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not task.done():
                task.cancel()
                # A gather whose parts are cancelled ends with an error nobody asks for.
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
        if not task.done():
            return False
        task.result()
        return True

    def _summary(self, step: int, elapsed_s: float) -> dict[str, Any]:
        """What `run()` returns; a run stopped before its first step of this session (during
        start-up) returns it at once: nothing was learned, so there is nothing to checkpoint."""
        return {
            "steps": step,
            "stopped": self.stop_reason,
            "elapsed_s": elapsed_s,
            "last_eval_reward": self._last_eval,
            "first_eval_reward": self._first_eval,
        }

    async def _loop(self, step: int, elapsed_before: float, running: list[Any]) -> dict[str, Any]:
        cfg = self.config
        started = time.monotonic() - elapsed_before
        deadline = math.inf if cfg.run.max_minutes is None else started + cfg.run.max_minutes * 60
        sync: asyncio.Task[None] | None = None
        evals: list[asyncio.Task[None]] = []
        last_tokens, last_time = await self._generated_tokens(), time.monotonic()
        logged, learning = step, False  # logged: the last step whose metrics are written
        try:
            while step < cfg.run.max_steps:
                if self._stop.is_set():
                    break
                step_start = time.monotonic()
                batch = await self._assemble(step, running, deadline)
                if batch is None:
                    break
                if sync is not None:
                    # The learner sends the last step's weights before it can step again (one
                    # call at a time); a sync that failed stops the run here, not a step later.
                    await sync
                learn_start = time.monotonic()
                learning = True  # until it returns, the learner's state is not a step's
                learned = await self._learner.step.remote(self._collate(batch))
                learning = False
                learn_s = time.monotonic() - learn_start
                step += 1
                sync = self._pending_sync = asyncio.create_task(self._sync(step))
                if cfg.algorithm.max_staleness == 0:
                    await sync  # synchronous: the next rollouts need these weights
                now = time.monotonic()
                tokens = await self._generated_tokens()
                record = self._record(step, batch, learned, now - step_start, learn_s)
                record["time_s"] = now - started
                record["tokens_per_s"] = (tokens - last_tokens) / max(now - last_time, 1e-9)
                last_tokens, last_time = tokens, now
                self._metrics.log(record)
                logged = step
                self._save_samples(batch)
                if step % cfg.run.checkpoint_every == 0:
                    await self._checkpoint(step, now - started)
                if cfg.eval.every and step % cfg.eval.every == 0 and step < cfg.run.max_steps:
                    evals.append(asyncio.create_task(self._evaluate(step, after=sync)))
                if step % 5 == 0:
                    self._metrics.plot()
                if self.on_step is not None:
                    self.on_step(
                        StepReport(
                            step=step,
                            max_steps=cfg.run.max_steps,
                            reward=record["train/reward"],
                            tokens_per_s=record["tokens_per_s"],
                            staleness=record["staleness/mean"],
                            queue_depth=record["queue_depth"],
                            idle_fraction=record["learner/idle_fraction"],
                            eval_reward=self._last_eval,
                        )
                    )
        except Exception:
            # A rollout worker died or failed: the learner's steps since the last checkpoint
            # need not be lost with it, if it holds the state of a logged step.
            if not learning and logged == step:
                await self._checkpoint_after_failure(step, time.monotonic() - started, sync)
            if sync is not None and sync.done() and not sync.cancelled():
                sync.exception()  # a sync into the dead engine failed too: not news
            raise
        if sync is not None:
            await sync
        self.stop_reason = self.stop_reason or f"reached max_steps={cfg.run.max_steps}"
        elapsed = time.monotonic() - started
        state = self.dir.state()
        if state is None or state["step"] != step:
            await self._checkpoint(step, elapsed)
        _cancel(running)
        if self._stop.is_set():  # stopping: an evaluation under way is not waited for
            for evaluation in evals:
                evaluation.cancel()
        await asyncio.gather(*evals, return_exceptions=True)
        if cfg.eval.every and step > 0 and not self._stop.is_set():
            await self._evaluate(step)
        self._metrics.plot()
        if self._failure is not None:
            raise self._failure
        return self._summary(step, elapsed)

    _last_eval: float | None = None
    _first_eval: float | None = None
    _evaluations = 0
    _bf16 = False  # whether the learner trains in bf16, as it resolved learner.bf16

    async def _generated_tokens(self) -> int:
        # A dead worker is noticed, and its error raised, where the batch waits for it.
        stats = await asyncio.gather(
            *(w.stats.remote() for w in self._workers), return_exceptions=True
        )
        return sum(int(s["generated_tokens"]) for s in stats if not isinstance(s, BaseException))

    async def _assemble(self, version: int, running: list[Any], deadline: float) -> _Batch | None:
        """Take groups off the queue until `batch_groups` usable ones are in hand; None when
        the run stops first (its time is up while the groups come slowly, say)."""
        algo = self.config.algorithm
        batch = _Batch()
        while len(batch.groups) < algo.batch_groups:
            if self._stop.is_set():
                return None
            if time.monotonic() >= deadline:
                self.stop_reason = f"reached max_minutes={self.config.run.max_minutes:g}"
                return None
            waited = time.monotonic()
            try:
                got = await self._queue.get_batch(
                    algo.batch_groups - len(batch.groups), timeout_s=1.0
                )
            except TimeoutError:
                got = []
                self._check_workers(running)
                self._check_sync()
            batch.wait_s += time.monotonic() - waited
            discarded = 0
            for group in got:
                verdict = triage(group, version, algo)
                self._failed.add(group)
                if notice := self._no_signal.add(group, verdict):
                    self.log(notice)
                if verdict == "failed":
                    batch.errors.update(t.error.cause for t in group if t.error is not None)
                if verdict != "stale" and verdict != "failed":
                    batch.seen.append(group)
                if verdict == "keep":
                    batch.groups.append(group)
                    continue
                discarded += 1
                setattr(batch, verdict, getattr(batch, verdict) + 1)
            if discarded:
                # Their places go back at once: rollouts must go on while the batch fills.
                await self._admission.discard.remote(discarded)
            if self._failed.in_a_row >= self.config.run.max_failed_groups:
                self._failure = self._failed.error(self.config, self.dir.path, version)
                self.stop(f"the last {self._failed.in_a_row} groups failed")
                return None
            if self._no_signal.in_a_row >= self._no_signal.limit:
                self._failure = self._no_signal.error(self.dir.path, version)
                self.stop(f"the last {self._no_signal.in_a_row} groups carried no signal")
                return None
        return batch

    def _check_sync(self) -> None:
        """A weight sync that failed leaves engines holding their requests: no rollouts come
        while the batch waits, so its error is raised here, not after the batch."""
        sync = self._pending_sync
        if sync is not None and sync.done() and not sync.cancelled():
            sync.result()

    def _check_workers(self, running: list[Any]) -> None:
        import ray

        done, _ = ray.wait(running, timeout=0)
        for ref in done:
            ray.get(ref)  # raises the worker's error
            raise AgentHubError("a rollout worker stopped producing episodes")

    def _collate(self, batch: _Batch) -> Any:
        from agenthub.trainer._advantages import advantages
        from agenthub.trainer._batch import TrainBatch

        trajectories = [t for group in batch.groups for t in group]
        rewards = [t.reward for t in trajectories]
        estimator = self.config.algorithm.estimator
        critic = estimator == "gae"  # the learner's critic turns rewards into advantages
        adv = (
            [0.0] * len(rewards) if critic else advantages(rewards, len(batch.groups[0]), estimator)
        )
        return TrainBatch.collate(
            [t.tokens for t in trajectories],
            [t.loss_mask for t in trajectories],
            [t.logprobs for t in trajectories],
            adv,
            rewards=rewards if critic else None,
        )

    def _record(
        self, step: int, batch: _Batch, learned: dict[str, float], step_s: float, learn_s: float
    ) -> dict[str, Any]:
        seen = [t for group in batch.seen for t in group]
        trained = [t for group in batch.groups for t in group]
        staleness = [step - 1 - _min_version(g) for g in batch.groups]
        record: dict[str, Any] = {
            "step": step,
            "train/reward": sum(t.reward for t in seen) / len(seen) if seen else float("nan"),
            "train/score": sum(t.success_score for t in seen) / len(seen) if seen else float("nan"),
            "train/trained_reward": sum(t.reward for t in trained) / len(trained),
            "train/generated_tokens": sum(t.num_generated_tokens for t in trained),
            "train/mean_turns": sum(t.num_turns for t in trained) / len(trained),
            "groups/trained": len(batch.groups),
            "groups/filtered": batch.filtered,
            "groups/stale": batch.stale,
            "groups/failed": batch.failed,
            "staleness/mean": sum(staleness) / len(staleness),
            "staleness/max": max(staleness),
            "queue_depth": self._queue.qsize(),
            "learner/step_s": step_s,
            "learner/learn_s": learn_s,
            "learner/wait_s": batch.wait_s,
            "learner/idle_fraction": batch.wait_s / step_s if step_s > 0 else 0.0,
            "learner/sync_s": self._sync_s,
        }
        # An env's own numbers (OpenRLHF's extra_logs): the mean over the episodes logging each.
        record.update({f"train/extra/{k}": v for k, v in mean_extra_logs(seen).items()})
        record.update({f"errors/{cause}": n for cause, n in batch.errors.items()})
        record.update({f"learner/{k}": v for k, v in learned.items()})
        return record

    def _save_samples(self, batch: _Batch) -> None:
        n = self.config.run.save_trajectories
        if not n:
            return
        with (self.dir.path / SAMPLES).open("a", encoding="utf-8") as sink:
            for t in [t for group in batch.groups for t in group][:n]:
                sink.write(t.model_dump_json() + "\n")

    async def _sync(self, version: int) -> None:
        """Broadcast the learner's weights to every engine as `version` (vLLM's weight-transfer
        API, driven from the learner's process), then admit rollouts for it."""
        self._sync_s = await self._learner.send_weights.remote(version)
        await self._admission.set_version.remote(version)

    def _evaluated(self, reward: float | None) -> None:
        if not self._evaluations:
            self._first_eval = reward
        self._last_eval = reward
        self._evaluations += 1

    async def _evaluate(self, step: int, after: asyncio.Task[None] | None = None) -> None:
        """Held-out reward of step `step`'s policy: the evaluation waits for that step's weight
        sync (`after`), or in async mode it would measure the policy before it."""
        if after is not None:
            await after
        cfg = self.config.eval
        result = await self._workers[0].evaluate.remote(
            cfg.tasks, cfg.split, cfg.temperature, cfg.samples_per_task
        )
        # With every episode failed there is no reward (NaN): the summary says none, rather
        # than an earlier evaluation's reward as the last or a later one's as the first.
        self._evaluated(result["reward"] if result["errors"] < result["episodes"] else None)
        self._metrics.log(
            {
                "step": step,
                "eval/reward": result["reward"],
                "eval/score": result["score"],
                "eval/policy_version": result["version"],
                "eval/policy_version_max": result["version_max"],
                "eval/errors": result["errors"],
            }
        )
        self._metrics.plot()
        versions = f" {result['version']}"
        if result["version_max"] != result["version"]:
            versions = f"s {result['version']}-{result['version_max']}"
        self.log(_evaluated(step, result, versions))

    async def _checkpoint(self, step: int, elapsed_s: float) -> None:
        tag = f"step-{step}"
        await self._learner.save_checkpoint.remote(str(self.dir.checkpoints), tag)
        if self.config.run.save_model:
            about = {"step": step, "tag": tag}
            await self._learner.save_model.remote(str(self.dir.path / MODEL), about)
        stats = await asyncio.gather(
            *(w.stats.remote() for w in self._workers), return_exceptions=True
        )
        # A dead worker's place in its task stream is its last checkpointed one: its tasks
        # since are played again.
        before = (self.dir.state() or {}).get("tasks_drawn", [0] * len(stats))
        self.dir.write_state(
            {
                "step": step,
                "tag": tag,
                "tasks_drawn": [
                    before[i] if isinstance(s, BaseException) else int(s["tasks_drawn"])
                    for i, s in enumerate(stats)
                ],
                "elapsed_s": elapsed_s,
                "samples_bytes": self.dir.samples_size(),
                "bf16": self._bf16,
            },
            keep=self.config.run.keep_checkpoints,
        )

    async def _export_again(self, state: dict[str, Any]) -> None:
        """`model/` is written just before the checkpoint's state.json: a run killed between
        the two left the policy of a step that no checkpoint kept, and the resumed run redoes
        that step. It is written again from the checkpoint the run resumed from."""
        if not self.config.run.save_model:
            return
        held = self.dir.exported_step()
        if held == state["step"]:
            return
        await self._learner.save_model.remote(
            str(self.dir.path / MODEL), {"step": state["step"], "tag": state["tag"]}
        )
        if held is not None:
            self.log(f"{MODEL}/ held the policy of step {held}; written again from {state['tag']}")

    def _check_precision(self, state: dict[str, Any]) -> None:
        """DeepSpeed loads a checkpoint only in the precision it was written in: with
        `learner.bf16=null` that depends on the device the learner landed on."""
        if state.get("bf16", self._bf16) == self._bf16:
            return
        asked = self.config.learner.bf16
        how = "as asked" if asked is not None else "chosen by its device, learner.bf16=null"
        raise AgentHubError(
            f"--resume: checkpoint {state['tag']} was written by a learner training "
            f"{'in' if state['bf16'] else 'without'} bf16, and this one trains "
            f"{'in' if self._bf16 else 'without'} it ({how}); resume with "
            f"learner.bf16={json.dumps(state['bf16'])}"
        )

    async def _checkpoint_after_failure(
        self, step: int, elapsed_s: float, sync: asyncio.Task[None] | None
    ) -> None:
        """Checkpoint the learner at `step` after a failure elsewhere, if that saves steps and
        the learner is idle. A weight sync into a dead engine fails (the learner's weights stay
        as they were) or hangs: it is given a while to end, and the learner left alone if not."""
        state = self.dir.state()
        if step == (state["step"] if state else 0):
            return
        if sync is not None:
            await asyncio.wait({sync}, timeout=60)
            if not sync.done():
                self.log(f"could not checkpoint step {step}: the learner is still sending weights")
                return
        try:
            await asyncio.wait_for(self._checkpoint(step, elapsed_s), timeout=600)
        except Exception as exc:
            self.log(f"could not checkpoint step {step} after the failure: {exc!r}")
        else:
            self.log(f"checkpointed step {step} after the failure")


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _interruptible:
    """The first Ctrl-C (or SIGTERM, or SIGHUP: the terminal or ssh session closed) asks the
    trainer to stop after the current step and save a checkpoint; a second Ctrl-C stops at
    once."""

    def __init__(self, loop: asyncio.AbstractEventLoop, trainer: Trainer) -> None:
        self.loop = loop
        self.trainer = trainer
        self.presses = 0

    def _handle(self, sig: signal.Signals) -> None:
        if self.trainer._stop.is_set() and sig is not signal.SIGINT:
            return  # a supervisor's repeated SIGTERM, a hang-up's SIGHUP twice: still saving
        self.presses += 1
        if self.presses > 1:
            raise KeyboardInterrupt
        self.trainer.stop(f"interrupted by {sig.name}")  # first: a closed terminal fails writes
        self.trainer.log(
            f"{sig.name}: stopping after this step and saving a checkpoint "
            "(press Ctrl-C again to quit without saving)"
        )

    def __enter__(self) -> _interruptible:
        # A run under nohup ignores SIGHUP to outlive the terminal: it keeps doing so.
        self.signals = [
            sig
            for sig in _STOP_SIGNALS
            if not (sig is signal.SIGHUP and signal.getsignal(sig) is signal.SIG_IGN)
        ]
        for sig in self.signals:
            self.loop.add_signal_handler(sig, self._handle, sig)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig in self.signals:
            self.loop.remove_signal_handler(sig)
