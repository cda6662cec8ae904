"""`agenthub eval`: run a model on an environment's tasks and write trajectories and a summary.

The command parses its flags into an `EvalConfig`, plays an `EvalRun` (the library behind
`agenthub.evaluate`) under a progress bar, and says what happened; the numbers are the
library's."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agenthub._errors import AgentHubError
from agenthub._pairs import parse_kwargs
from agenthub.agents import ChatTokenizer, InferenceEngine, Timeouts, Trajectory
from agenthub.agents._engines import open_engine
from agenthub.agents._eval_summary import EvalSummary, counted_reward
from agenthub.agents._evaluate import FAILED, SUMMARY, TRAJECTORIES, EvalConfig, EvalRun
from agenthub.agents._run_dir import locked, writable
from agenthub.cli._envs import add_env_arguments, find_local_envs, run_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_env_arguments(parser, classes=False)
    parser.add_argument(
        "--reward-func",
        default=None,
        metavar="FILE",
        help="an OpenRLHF reward_func file (same as the env argument reward_func=FILE)",
    )
    parser.add_argument(
        "--agent-func",
        default=None,
        metavar="FILE",
        help="an OpenRLHF agent_func file (same as the env argument agent_func=FILE)",
    )
    parser.add_argument(
        "--model",
        default=None,
        metavar="PATH|default",
        help="local model directory, or 'default' for the embedded default model (the default "
        "unless --base-url is given). With --base-url it only provides the tokenizer.",
    )
    parser.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="an OpenAI-compatible server that takes token ids (e.g. vllm serve), ending in /v1",
    )
    parser.add_argument(
        "--out", default=None, metavar="DIR", help="output directory (default: runs/eval-ENV)"
    )
    _add_task_arguments(parser)
    _add_sampling_arguments(parser)


def _add_task_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", default=None, metavar="FILE", help="JSONL task file")
    parser.add_argument("--split", default="held_out", choices=["train", "held_out"])
    parser.add_argument("-n", type=int, default=None, metavar="N", help="tasks to run (all)")
    parser.add_argument("-k", type=int, default=1, metavar="K", help="samples per task")
    parser.add_argument("--concurrency", type=int, default=32, metavar="C")
    parser.add_argument(
        "--no-chat-template",
        dest="chat_template",
        action="store_false",
        help="tokenize text prompts as they are (prompts already templated, base models)",
    )


def _add_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-turns",
        type=int,
        default=None,
        metavar="T",
        help="cut episodes after T replies (default: the env ends them, within --max-tokens)",
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        metavar="M",
        help="longest token sequence per episode (default: the model's context)",
    )
    parser.add_argument(
        "--max-reply-tokens", type=int, default=512, metavar="R", help="tokens per reply"
    )
    parser.add_argument("--temperature", type=float, default=1.0, metavar="X")
    parser.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="TEXT",
        help="end a reply once it writes TEXT, kept in the reply (repeat for several; the "
        "env's own `stop` strings apply too)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--env-step-timeout",
        type=float,
        default=Timeouts().env_step_s,
        metavar="S",
        help="seconds an env reset or step may take before its episode ends as env_timeout "
        "(default: %(default)g; a remote judge's retries must fit in it)",
    )
    parser.add_argument(
        "--generate-timeout",
        type=float,
        default=Timeouts().generate_s,
        metavar="S",
        help="seconds one reply may take before its episode ends as generation_timeout "
        "(default: %(default)g; shorten it against a server that may hang)",
    )


def eval_command(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else run_dir("eval", args.env)
    find_local_envs(args.env)
    config = eval_config(args)
    tasks = config.load_tasks()
    with writable(out):
        out.mkdir(parents=True, exist_ok=True)
    with locked(out, command="eval"):
        with writable(out):
            run = EvalRun.open(config, out, tasks)
        _say_prepared(run)
        if run.work:
            try:
                anyio.run(_until_sigterm, functools.partial(_play, run))
            except KeyboardInterrupt:
                _say_interrupted(run)
                return 130
        with writable(out):
            summary = run.summary()
    return _report(run, summary)


def eval_config(args: argparse.Namespace) -> EvalConfig:
    """The flags as an `EvalConfig`, each wrong value named by its flag."""
    _check_numbers(args)
    try:
        return EvalConfig(
            env=args.env,
            env_kwargs=_env_kwargs(args),
            tasks_file=args.tasks,
            split=args.split,
            num_tasks=args.n,
            samples_per_task=args.k,
            model=args.model,
            base_url=args.base_url,
            temperature=args.temperature,
            seed=args.seed,
            max_reply_tokens=args.max_reply_tokens,
            max_tokens=args.max_tokens,
            max_turns=args.max_turns,
            stop=tuple(args.stop),
            chat_template=args.chat_template,
            concurrency=args.concurrency,
            generate_timeout_s=args.generate_timeout,
            env_step_timeout_s=args.env_step_timeout,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise AgentHubError(f"{problems}; see agenthub eval --help") from None


def _say_prepared(run: EvalRun) -> None:
    if run.rerun:
        print(
            f"re-running {run.rerun} episodes that ended in errors (their records are kept "
            f"in {run.out / FAILED})",
            file=sys.stderr,
        )
    if not run.work:
        print(
            f"agenthub: all {run.total} episodes are already in {run.out}, from an earlier run "
            "with these settings; nothing was run. To play them again (after changing the "
            "env, say), delete that directory or pass another --out.",
            file=sys.stderr,
        )
    elif run.kept:
        print(
            f"resuming: {len(run.kept)} of {run.total} episodes are kept from an earlier run "
            f"in {run.out}",
            file=sys.stderr,
        )


def _report(run: EvalRun, summary: EvalSummary) -> int:
    """Print the summary's line (stdout) and what to know about it (stderr); the exit code."""
    print(
        json.dumps(summary.model_dump(include={"episodes", "mean_reward", "pass_at_k", "errors"}))
    )
    out = run.out
    print(f"wrote {out / TRAJECTORIES} and {out / SUMMARY}", file=sys.stderr)
    if not summary.num_errors:
        return 0
    failed = [t for t in run.finished() if t.error is not None]
    causes = ", ".join(f"{c} x{n}" for c, n in summary.errors.items())
    last = failed[-1].error
    assert last is not None
    print(
        f"agenthub: {len(failed)} of {summary.episodes} episodes ended in errors ({causes}) "
        f"and count as reward 0 above; the last, task {failed[-1].task_id!r}: {last.cause}: "
        f"{last.message.rstrip('.')}. Each is in {TRAJECTORIES} with its error; running the "
        "same command again re-runs them.",
        file=sys.stderr,
    )
    # Nothing measured is a setup problem, most likely, not the model's.
    return 1 if len(failed) == summary.episodes else 0


def _say_interrupted(run: EvalRun) -> None:
    """What an interrupted eval leaves: each finished episode's line, which a rerun skips."""
    kept = {(t.task_id, t.sample) for t in run.finished() if t.error is None}
    print(
        f"agenthub: interrupted; {len(kept)} of {run.total} episodes are done and kept in "
        f"{run.out / TRAJECTORIES}. Running the same command again plays the other "
        f"{run.total - len(kept)}.",
        file=sys.stderr,
    )


def _check_numbers(args: argparse.Namespace) -> None:
    counts = {
        "-n": args.n,
        "-k": args.k,
        "--concurrency": args.concurrency,
        "--max-reply-tokens": args.max_reply_tokens,
        "--max-tokens": args.max_tokens,
        "--max-turns": args.max_turns,
    }
    if wrong := [
        f"{flag} {value}" for flag, value in counts.items() if value is not None and value < 1
    ]:
        raise AgentHubError(f"{', '.join(wrong)}: each must be at least 1")
    if args.temperature < 0:
        raise AgentHubError(f"--temperature {args.temperature}: must be 0 (greedy) or more")
    for flag, seconds in (
        ("--env-step-timeout", args.env_step_timeout),
        ("--generate-timeout", args.generate_timeout),
    ):
        if not seconds > 0:
            raise AgentHubError(f"{flag} {seconds:g}: must be above 0")
    if "" in args.stop:
        raise AgentHubError("--stop '': a stop string cannot be empty")
    if args.base_url is not None:
        from agenthub.envs._http import url_list

        try:
            url_list(args.base_url, argument="--base-url", example="http://127.0.0.1:8000/v1")
        except ValueError as exc:
            raise AgentHubError(str(exc)) from exc


def _env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs = parse_kwargs(args.env_kwargs)
    for flag, key in ((args.reward_func, "reward_func"), (args.agent_func, "agent_func")):
        if flag is not None:
            if key in kwargs and kwargs[key] != flag:
                raise AgentHubError(f"--{key.replace('_', '-')} and {key}= disagree; give one")
            kwargs[key] = flag
    return kwargs


async def _until_sigterm(play: Callable[[], Awaitable[None]]) -> None:
    """Await `play()`. SIGTERM (a job scheduler's, `kill`) stops it as Ctrl-C does: the running
    episodes are cancelled, their envs closed, and `KeyboardInterrupt` raised."""
    with anyio.CancelScope() as scope, _on_sigterm(scope.cancel):
        await play()
    if scope.cancelled_caught:
        raise KeyboardInterrupt


@contextmanager
def _on_sigterm(callback: Callable[[], object]) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, callback)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


async def _play(run: EvalRun) -> None:
    chat, engine = await _build_engine(run.config)
    try:
        with _progress() as progress:
            bar = progress.add_task("eval", total=run.total, completed=len(run.kept), stats="")
            stats = _Stats(run.kept)

            async def show(trajectory: Trajectory) -> None:
                progress.update(bar, advance=1, stats=stats.add(trajectory))

            await run.aplay(engine, chat, show)
    finally:
        await engine.aclose()


async def _build_engine(config: EvalConfig) -> tuple[ChatTokenizer, InferenceEngine]:
    return await open_engine(
        config.model, base_url=config.base_url, seed=config.seed, concurrency=config.concurrency
    )


class _Stats:
    """The bar's figures: rates of this run's episodes, and the mean reward of every episode
    the summary will count (those kept from an earlier run too), counted as it counts them."""

    def __init__(self, kept: Sequence[Trajectory] = ()) -> None:
        self.start = time.perf_counter()
        self.episodes = 0
        self.tokens = 0
        self.counted = len(kept)
        self.reward = sum(counted_reward(t) for t in kept)

    def add(self, trajectory: Trajectory) -> str:
        self.episodes += 1
        self.tokens += trajectory.num_generated_tokens
        self.counted += 1
        self.reward += counted_reward(trajectory)
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return (
            f"{self.episodes / elapsed:.2f} ep/s  {self.tokens / elapsed:.0f} tok/s  "
            f"reward {self.reward / self.counted:.3f}"
        )


def _progress() -> Progress:
    # On stderr, as everything but the summary: stdout is one JSON line, for `| jq` and scripts.
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[stats]}"),
        console=Console(stderr=True),
    )
