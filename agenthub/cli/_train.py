"""`agenthub train`: asynchronous off-policy RL on an environment."""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agenthub._errors import AgentHubError
from agenthub.cli._envs import find_local_envs, run_dir

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from agenthub.trainer._config import TrainConfig
    from agenthub.trainer._control import RunSummary
    from agenthub.trainer._metrics import StepReport
    from agenthub.trainer._rundir import RunDirectory


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default=None, metavar="ID", help="environment id")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="config overrides with dotted keys, e.g. learner.lr=3e-4 rollout.temperature=0.8 "
        "env_kwargs.num_tasks=200 (values are JSON when they parse)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="sparse TOML config file (repeatable; later files and overrides win)",
    )
    parser.add_argument(
        "--model",
        default=None,
        metavar="PATH|default",
        help="model directory (default: the embedded default model)",
    )
    parser.add_argument(
        "--out", default=None, metavar="DIR", help="run directory (default: runs/train-ENV)"
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the run in --out from its last checkpoint"
    )
    parser.add_argument("--steps", type=int, default=None, metavar="N", help="run.max_steps")
    parser.add_argument("--minutes", type=float, default=None, metavar="M", help="run.max_minutes")
    parser.add_argument(
        "--ray-address", default=None, metavar="ADDR", help="join this Ray cluster (ray.address)"
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config and exit"
    )


def train_command(args: argparse.Namespace) -> int:
    from agenthub.trainer._config import load_config
    from agenthub.trainer._rundir import RunDirectory

    overrides = list(args.overrides)
    for flag, key in (
        ("env", "env"),
        ("model", "model"),
        ("steps", "run.max_steps"),
        ("minutes", "run.max_minutes"),
        ("ray_address", "ray.address"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides.append(f"{key}={json.dumps(value)}")
    out = Path(args.out) if args.out else None
    base = None
    if args.resume:
        if out is None:
            if args.env is None:
                raise AgentHubError("--resume needs --out DIR (or --env ID for runs/train-ID)")
            out = run_dir("train", args.env)
        base = RunDirectory(out).saved_config()
        if base is None:
            raise AgentHubError(f"--resume: {out} holds no training run (no config.json)")
    if base is None and args.env is None and not args.config:
        raise AgentHubError("agenthub train needs --env ID (see `agenthub envs list`)")
    config = load_config(args.config, overrides, base=copy.deepcopy(base))  # base stays as saved
    if base is not None and base["env"] != config.env:
        raise AgentHubError(
            f"--resume: {out} trains env {base['env']!r}, not {config.env!r}; drop --env or "
            "choose another --out"
        )
    out = out or run_dir("train", config.env)
    find_local_envs(config.env)
    if args.print_config:
        print(config.model_dump_json(indent=2))
        return 0
    if args.resume and (complete := _complete(RunDirectory(out), config)):
        # Said before Ray and the learner spend half a minute starting only to stop again.
        print(f"agenthub train: the run in {out} {complete}", file=sys.stderr)
        return 0
    return _run(config, out, args.resume)


def _complete(run: RunDirectory, config: TrainConfig) -> str | None:
    """Why a run resumed with `config` would stop before its first step, if it would."""
    state = run.state()
    done, minutes = (state.step, state.elapsed_s / 60) if state else (0, 0.0)
    again = f"to train further, run agenthub train --out {run.path} --resume"
    if done >= config.run.max_steps:
        return (
            f"is complete at step {done} of max_steps={config.run.max_steps}; {again} --steps M "
            f"with M above {done}"
        )
    if config.run.max_minutes is not None and minutes >= config.run.max_minutes:
        return (
            f"has used its max_minutes={config.run.max_minutes:g} ({minutes:.1f} minutes trained, "
            f"to step {done}); {again} --minutes M with M above {minutes:.1f}"
        )
    return None


def _run(config: TrainConfig, out: Path, resume: bool) -> int:
    from rich.console import Console

    from agenthub.trainer._loop import Trainer

    console = Console(stderr=True)
    display = _TrainDisplay(console, config.run.max_steps)
    trainer = Trainer(
        config,
        out,
        resume=resume,
        on_step=display.on_step,
        log=display.log,
        build_progress=_BuildOnBar(display.progress, display.bar),
    )
    console.print(f"agenthub train: env {config.env}, run directory {out}")
    # stdout is the JSON summary alone: what Ray prints here meanwhile (the raylet's notice of
    # a worker it lost) goes to stderr, with the run's other lines.
    with contextlib.redirect_stdout(sys.stderr), display.progress:
        try:
            summary = trainer.run()
        except BaseException:
            if not display.started:  # a run that failed before its first step leaves no bar
                display.progress.update(display.bar, visible=False)
            raise
        finally:
            if not display.started:  # the bar's last words were a log line, printed already
                display.progress.update(display.bar, stats="")
        if display.last and summary.last_eval_reward is not None:
            # The closing evaluation comes after the last step's report.
            display.on_step(dataclasses.replace(display.last, eval_reward=summary.last_eval_reward))
    _say_how_it_ended(console, summary, config, out)
    print(json.dumps(summary.to_json()), file=sys.stdout)
    return 130 if summary.interrupted else 0


def _say_how_it_ended(
    console: Console, summary: RunSummary, config: TrainConfig, out: Path
) -> None:
    model = " model/," if config.run.save_model else ""
    steps = f"{summary.steps} step" + ("" if summary.steps == 1 else "s")
    if summary.steps == 0:
        console.print(f"stopped before the first step ({summary.stopped})")
    else:
        console.print(
            f"stopped after {steps} ({summary.stopped}); "
            f"checkpoint,{model} metrics.jsonl and reward.png in {out}"
        )
    if summary.first_eval_reward is not None:
        console.print(
            f"held-out reward: {summary.first_eval_reward:.3f} at the start, "
            f"{summary.last_eval_reward:.3f} at the end"
        )
    if summary.interrupted:
        console.print(f"resume with: agenthub train --out {out} --resume")


class _TrainDisplay:
    """The train bar: what the run is doing until its first step, then each step's numbers;
    the run's log lines print above it."""

    def __init__(self, console: Console, max_steps: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[stats]}"),
            console=console,
        )
        self.bar = self.progress.add_task("train", total=max_steps, stats="starting")
        self.started = False
        self.last: StepReport | None = None

    def on_step(self, report: StepReport) -> None:
        self.started = True
        self.last = report
        held = "" if report.eval_reward is None else f"  held-out {report.eval_reward:.3f}"
        self.progress.update(
            self.bar,
            completed=report.step,
            stats=f"reward {report.reward:.3f}{held}  {report.tokens_per_s:.0f} tok/s  "
            f"staleness {report.staleness:.1f}  queue {report.queue_depth}  "
            f"idle {report.idle_fraction:.0%}",
        )

    def log(self, line: str) -> None:
        self.progress.console.print(line)
        if not self.started:  # until the first step, the bar says what the run is doing
            self.progress.update(self.bar, stats=line)


class _BuildOnBar:
    """The default model's first build (minutes, once per machine) shown on the train bar."""

    def __init__(self, progress: Progress, bar: TaskID) -> None:
        self._progress, self._bar = progress, bar
        self._name, self._done, self._total = "", 0, 0

    def phase(self, name: str, total: int | None = None) -> None:
        self._name, self._done, self._total = name, 0, total or 0
        self._show("")

    def advance(self, loss: float | None = None) -> None:
        self._done += 1
        self._show("" if loss is None else f" loss {loss:.3f}")

    def _show(self, loss: str) -> None:
        steps = f" {self._done}/{self._total}" if self._total else ""
        self._progress.update(self._bar, stats=f"default model: {self._name}{steps}{loss}")
