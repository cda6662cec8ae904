"""`agenthub eval`: run a model on an environment's tasks and write trajectories and a summary."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import math
import os
import select
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agenthub._errors import AgentHubError, NoTaskSourceError
from agenthub._registry import make
from agenthub._returns import checked_tasks
from agenthub._tracebacks import raised
from agenthub._types import Task
from agenthub.agents import (
    ChatTokenizer,
    EpisodeRunner,
    InferenceEngine,
    RolloutConfig,
    SamplingParams,
    Timeouts,
    Trajectory,
)
from agenthub.agents._trajectory import mean_extra_logs
from agenthub.cli._envs import find_local_envs, parse_kwargs, run_dir

if TYPE_CHECKING:
    from agenthub.agents.default_model import BuildProgress

TRAJECTORIES = "trajectories.jsonl"
FAILED = "failed.jsonl"  # episodes that ended in errors, moved out of TRAJECTORIES to be re-run
SUMMARY = "summary.json"
RUN = "eval.json"
# What makes two runs the same run: a resumed run must agree on all of these (the model and
# how it is sampled too, or a second model's run would report the first one's episodes).
_IDENTITY = (
    "env",
    "env_kwargs",
    "tasks",
    "split",
    "k",
    "chat_template",
    "model",
    "base_url",
    "temperature",
    "seed",
    "max_reply_tokens",
    "max_tokens",
    "max_turns",
    "stop",
)
# What a run written before a key existed had (so it still resumes); a key neither there nor
# here was not recorded and is not compared.
_IDENTITY_DEFAULTS: dict[str, Any] = {"chat_template": True, "stop": []}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, metavar="ID", help="environment id")
    parser.add_argument(
        "env_kwargs", nargs="*", metavar="KEY=VALUE", help="environment arguments (JSON values)"
    )
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
    parser.add_argument("--tasks", default=None, metavar="FILE", help="JSONL task file")
    parser.add_argument("--split", default="held_out", choices=["train", "held_out"])
    parser.add_argument("-n", type=int, default=None, metavar="N", help="tasks to run (all)")
    parser.add_argument("-k", type=int, default=1, metavar="K", help="samples per task")
    parser.add_argument("--concurrency", type=int, default=32, metavar="C")
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
    parser.add_argument(
        "--no-chat-template",
        dest="chat_template",
        action="store_false",
        help="tokenize text prompts as they are (prompts already templated, base models)",
    )
    parser.add_argument(
        "--out", default=None, metavar="DIR", help="output directory (default: runs/eval-ENV)"
    )


def eval_command(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else run_dir("eval", args.env)
    find_local_envs(args.env)
    identity = {
        "env": args.env,
        "env_kwargs": _env_kwargs(args),
        "tasks": str(Path(args.tasks).resolve()) if args.tasks else None,
        "split": args.split,
        "k": args.k,
        "chat_template": args.chat_template,
        "model": _model_identity(args.model),
        "base_url": args.base_url,
        "temperature": args.temperature,
        "seed": args.seed,
        "max_reply_tokens": args.max_reply_tokens,
        "max_tokens": args.max_tokens,
        "max_turns": args.max_turns,
        "stop": args.stop,
    }
    _check_numbers(args)
    tasks = load_tasks(identity, args.n)
    with _writable(out):
        finished = prepare_out_dir(out, identity)
    done: dict[str, set[int]] = defaultdict(set)
    for t in finished:
        done[t.task_id].add(t.sample)
    missing = {t.id: [i for i in range(args.k) if i not in done[t.id]] for t in tasks}
    work = [(t, missing[t.id]) for t in tasks if missing[t.id]]
    total = len(tasks) * args.k
    config = RolloutConfig(
        sampling=SamplingParams(
            max_tokens=args.max_reply_tokens,
            temperature=args.temperature,
            seed=args.seed,
            stop=tuple(args.stop),
        ),
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        concurrency=args.concurrency,
        n_samples_per_prompt=args.k,
        seed=args.seed,
        chat_template=args.chat_template,
        timeouts=Timeouts(generate_s=args.generate_timeout, env_step_s=args.env_step_timeout),
    )
    wanted = {t.id for t in tasks}
    if work:
        kept = [t for t in finished if t.task_id in wanted and t.sample < args.k]
        if kept:
            print(
                f"resuming: {len(kept)} of {total} episodes are kept from an earlier run in {out}",
                file=sys.stderr,
            )
        try:
            play = functools.partial(_play, args, identity, config, work, out, kept, total)
            anyio.run(_until_sigterm, play)
        except KeyboardInterrupt:
            _say_interrupted(out, wanted, total)
            return 130
    else:
        print(
            f"agenthub: all {total} episodes are already in {out}, from an earlier run with "
            "these settings; nothing was run. To play them again (after changing the env, "
            "say), delete that directory or pass another --out.",
            file=sys.stderr,
        )
    # The directory may hold more tasks than this run asked for (an earlier, larger -n).
    trajectories = [t for t in read_trajectories(out / TRAJECTORIES) if t.task_id in wanted]
    summary = summarize(trajectories, args.k)
    with _writable(out):
        (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: summary[k] for k in ("episodes", "mean_reward", "pass_at_k", "errors")}))
    print(f"wrote {out / TRAJECTORIES} and {out / SUMMARY}", file=sys.stderr)
    if failed := [t for t in trajectories if t.error is not None]:
        causes = ", ".join(f"{c} x{n}" for c, n in summary["errors"].items())
        last = failed[-1].error
        assert last is not None
        message = last.message.rstrip(".")
        print(
            f"agenthub: {len(failed)} of {len(trajectories)} episodes ended in errors ({causes}) "
            f"and count as reward 0 above; the last, task {failed[-1].task_id!r}: {last.cause}: "
            f"{message}. Each is in {TRAJECTORIES} with its error; running the same "
            "command again re-runs them.",
            file=sys.stderr,
        )
        if len(failed) == len(trajectories):
            return 1  # nothing was measured: a setup problem, most likely, not the model
    return 0


def _say_interrupted(out: Path, wanted: set[str], total: int) -> None:
    """What an interrupted eval leaves: each finished episode's line, which a rerun skips."""
    kept = {
        (t.task_id, t.sample)
        for t in read_trajectories(out / TRAJECTORIES)
        if t.task_id in wanted and t.error is None
    }
    print(
        f"agenthub: interrupted; {len(kept)} of {total} episodes are done and kept in "
        f"{out / TRAJECTORIES}. Running the same command again plays the other "
        f"{total - len(kept)}.",
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


@contextmanager
def _writable(out: Path) -> Iterator[None]:
    """An --out that cannot be written (read-only, full, a file in its path) is the user's to
    fix: say so in one line, not with the OS's traceback."""
    try:
        yield
    except OSError as exc:
        raise AgentHubError(
            f"cannot write to --out {out}: {exc.strerror or exc}; choose another --out, a "
            "directory you can write to"
        ) from exc


def _model_identity(model: str | None) -> str:
    """`--model` as a run records it: `default`, or the directory's absolute path."""
    return "default" if model in (None, "default") else str(Path(model).resolve())


def _env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs = parse_kwargs(args.env_kwargs)
    for flag, key in ((args.reward_func, "reward_func"), (args.agent_func, "agent_func")):
        if flag is not None:
            if key in kwargs and kwargs[key] != flag:
                raise AgentHubError(f"--{key.replace('_', '-')} and {key}= disagree; give one")
            kwargs[key] = flag
    return kwargs


def load_tasks(identity: dict[str, Any], n: int | None) -> list[Task]:
    from agenthub.envs._tasks import read_task_file

    env = make(identity["env"], **identity["env_kwargs"])  # also checks its arguments at once
    try:
        if identity["tasks"]:
            tasks = read_task_file(identity["tasks"], identity["env_kwargs"])
            selected = list(itertools.islice(tasks, n))
        else:
            # A procedural task source may be endless: take only what is asked for.
            selected = list(itertools.islice(checked_tasks(_env_tasks(env, identity)), n))
    finally:
        anyio.run(env.aclose)
    ids = Counter(t.id for t in selected)
    if duplicated := [i for i, c in ids.items() if c > 1]:
        raise AgentHubError(f"task ids must be unique to resume a run; repeated: {duplicated[:5]}")
    if not selected:
        raise AgentHubError("no tasks to evaluate")
    return selected


def _env_tasks(env: Any, identity: dict[str, Any]) -> Iterator[Task]:
    """The env's tasks of the split asked for; its failure, which is the env's bug or a split
    it lacks, said in a line that names where it happened and what to give instead."""
    split = identity["split"]
    try:
        yield from env.tasks(split)
    except NoTaskSourceError as exc:
        other = "train" if split != "train" else "held_out"
        raise AgentHubError(
            f"{str(exc).rstrip('.')}. Give tasks with --tasks FILE, or evaluate another split "
            f"(--split {other})"
        ) from exc
    except AgentHubError:
        raise
    except Exception as exc:
        raise AgentHubError(raised(f"the env's tasks({split!r})", exc)) from exc


def _get(identity: dict[str, Any], key: str) -> Any:
    return identity.get(key, _IDENTITY_DEFAULTS.get(key))


def prepare_out_dir(out: Path, identity: dict[str, Any]) -> list[Trajectory]:
    """Create `out`, or check it holds the same run; return the episodes it finished.
    Episodes that ended in errors are not finished: their lines move to `FAILED`, to be run
    again (after the env or server was fixed, say). A run that finished no episode (its start
    failed on a wrong --model or --base-url, say) holds nothing another run's settings could
    mix with: it is taken over."""
    out.mkdir(parents=True, exist_ok=True)
    run_file = out / RUN
    trajectories = read_trajectories(out / TRAJECTORIES, repair=True)
    if run_file.exists() and any(t.error is None for t in trajectories):
        previous = json.loads(run_file.read_text(encoding="utf-8"))
        changed = [
            key
            for key in _IDENTITY
            if (key in previous or key in _IDENTITY_DEFAULTS)
            and _get(previous, key) != _get(identity, key)
        ]
        if changed:
            raise AgentHubError(
                f"{out} holds an eval run with different {', '.join(changed)}; "
                "pass another --out, or delete the directory to start over"
            )
    else:
        run_file.write_text(json.dumps(identity, indent=2) + "\n", encoding="utf-8")
    if failed := [t for t in trajectories if t.error is not None]:
        with (out / FAILED).open("a", encoding="utf-8") as kept:
            kept.writelines(t.model_dump_json() + "\n" for t in failed)
        finished = [t for t in trajectories if t.error is None]
        partial = out / (TRAJECTORIES + ".partial")
        partial.write_text("".join(t.model_dump_json() + "\n" for t in finished), "utf-8")
        partial.replace(out / TRAJECTORIES)
        print(
            f"re-running {len(failed)} episodes that ended in errors (their records are kept "
            f"in {out / FAILED})",
            file=sys.stderr,
        )
    return [t for t in trajectories if t.error is None]


def read_trajectories(path: Path, *, repair: bool = False) -> list[Trajectory]:
    """Every complete line of `path`. With `repair`, a last line cut off by a crash is removed
    so the file can be appended to again."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    complete, _, tail = raw.rpartition(b"\n")
    if tail and repair:
        path.write_bytes(complete + b"\n" if complete else b"")
    lines = complete.decode("utf-8").splitlines() if complete else []
    return [Trajectory.model_validate_json(line) for line in lines if line.strip()]


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


async def _play(
    args: argparse.Namespace,
    identity: dict[str, Any],
    config: RolloutConfig,
    work: list[tuple[Task, list[int]]],
    out: Path,
    kept: list[Trajectory],
    total: int,
) -> None:
    chat, engine = await _build_engine(args)
    try:
        runner = EpisodeRunner(
            engine, chat, identity["env"], config, env_kwargs=identity["env_kwargs"]
        )
        with (
            (out / TRAJECTORIES).open("a", encoding="utf-8") as sink,
            _progress() as progress,
        ):
            bar = progress.add_task("eval", total=total, completed=len(kept), stats="")
            stats = _Stats(kept)

            async def write(trajectory: Trajectory) -> None:
                sink.write(trajectory.model_dump_json() + "\n")
                sink.flush()
                progress.update(bar, advance=1, stats=stats.add(trajectory))

            await runner.run(work, on_trajectory=write)
    finally:
        await engine.aclose()


def _vocab_size(model: Path, tokens: int) -> int:
    """Ids the served model can sample: its tokenizer's `tokens`, or its embedding's rows when
    its config.json says (padded past the tokenizer: Qwen2.5 has 151,665 tokens, 151,936 rows)."""
    try:
        rows = json.loads((model / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return tokens
    return max(tokens, rows) if isinstance(rows, int) else tokens


async def _build_engine(args: argparse.Namespace) -> tuple[ChatTokenizer, InferenceEngine]:
    model = resolve_model(args.model, needed=args.base_url is None)
    if args.base_url is not None:
        from agenthub.agents import OpenAIEngine

        if model is None:
            raise AgentHubError(
                "--base-url needs the model's tokenizer: pass --model PATH (a local copy of the "
                "served model's tokenizer) or --model default"
            )
        chat = ChatTokenizer.from_pretrained(model)
        # A token id the model lacks (another model served) fails its episode, not eval.
        engine = await OpenAIEngine.connect(
            args.base_url, vocab_size=_vocab_size(model, len(chat.tokenizer))
        )
        return chat, engine
    from agenthub.agents import VLLMEngine

    # vLLM's start-up and shutdown log would bury the progress bar, as in the REPL and the
    # trainer's workers; VLLM_LOGGING_LEVEL=INFO brings it back.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    assert model is not None
    chat = ChatTokenizer.from_pretrained(model)
    with interruptible_start():
        vllm = VLLMEngine(model, seed=args.seed, max_num_seqs=max(1, args.concurrency))
    return chat, vllm


@contextmanager
def interruptible_start(
    *,
    quitting: str = "nothing more was evaluated, and running the same command again starts it over",
    forgive: Callable[[], None] | None = None,
) -> Iterator[None]:
    """vLLM's start-up holds this thread, and the event loop that answers SIGTERM, for up to a
    minute, while its engine core, a child in the terminal's process group, gets a Ctrl-C too
    and dies. vLLM swallows the KeyboardInterrupt inside its start-up handshake and waits out
    its 10-minute timeout for the dead core (or fails with its own traceback). Meanwhile a
    Ctrl-C or SIGTERM ends the process at once, its children with it, saying `quitting`; a
    thread of its own catches a signal the handshake would not wake for, and no
    KeyboardInterrupt is ever raised into vLLM.

    `forgive`, where given, is called (from that thread) for the first Ctrl-C instead: the
    caller goes on once the engine is up (`agenthub repl`, whose engine core is out of the
    terminal's reach); a second one ends the process."""
    import psutil  # type: ignore[import-untyped]

    def quit_now() -> None:
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
        print(
            f"agenthub: interrupted while the engine started; {quitting}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(130)

    heard, told = os.pipe()
    os.set_blocking(told, False)
    done = threading.Event()
    forgiven = forgive is None  # the one Ctrl-C forgiven has come

    def watch() -> None:
        nonlocal forgiven
        while not done.is_set():
            if not select.select([heard], [], [], 0.1)[0]:
                continue
            for signum in os.read(heard, 64):
                if done.is_set():
                    return
                if signum == signal.SIGINT and not forgiven and forgive is not None:
                    forgiven = True
                    forgive()
                else:
                    quit_now()

    # The handlers do nothing themselves: the thread reads which signal came from the wakeup
    # file descriptor, in order.
    previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in _STOPS}
    wakeup = signal.set_wakeup_fd(told)
    watcher = threading.Thread(target=watch, name="agenthub-start-signals", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        watcher.join()
        os.close(heard)
        os.close(told)


_STOPS = (signal.SIGINT, signal.SIGTERM)


def resolve_model(
    model: str | None, *, needed: bool, progress: BuildProgress | None = None
) -> Path | None:
    """`--model`: a directory, or `default` (also when nothing is given and a model is needed).
    The default model is built on first use (minutes), its phases shown on `progress`, or on a
    display of their own that goes when it is done."""
    if model is None and not needed:
        return None
    if model is None or model == "default":
        try:
            from agenthub.agents.default_model import (  # type: ignore[import-not-found,unused-ignore]
                RichBuildProgress,
                ensure_default_model,
            )
        except ImportError as exc:
            raise AgentHubError(
                "the embedded default model is not part of this agenthub build yet; pass "
                "--model PATH (a local Hugging Face model directory) or --base-url URL"
            ) from exc
        if progress is not None:
            return ensure_default_model(progress=progress)
        with RichBuildProgress(transient=True) as shown:
            return ensure_default_model(progress=shown)
    path = Path(model)
    config = path / "config.json"
    if (path / "checkpoints").is_dir() and (path / "model").is_dir():
        raise AgentHubError(
            f"--model {model}: that is a training run; its policy at the last checkpoint is "
            f"--model {path / 'model'}"
        )
    if not config.is_file():
        raise AgentHubError(
            f"--model {model}: no config.json there; give a local Hugging Face model directory "
            "or 'default'"
        )
    try:
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (ValueError, AttributeError):
        model_type = None
    has_tokenizer = any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    if not model_type or not has_tokenizer:
        lacks = "no model_type in its config.json" if not model_type else "no tokenizer"
        raise AgentHubError(
            f"--model {model}: not a Hugging Face model directory (it has {lacks}); give "
            "one, a training run's model/ directory, or 'default'"
        )
    return path


class _Stats:
    """The bar's figures: rates of this run's episodes, and the mean reward of every episode
    the summary will count (those kept from an earlier run too), counted as it counts them."""

    def __init__(self, kept: Sequence[Trajectory] = ()) -> None:
        self.start = time.perf_counter()
        self.episodes = 0
        self.tokens = 0
        self.counted = len(kept)
        self.reward = sum(_counted_reward(t) for t in kept)

    def add(self, trajectory: Trajectory) -> str:
        self.episodes += 1
        self.tokens += trajectory.num_generated_tokens
        self.counted += 1
        self.reward += _counted_reward(trajectory)
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        return (
            f"{self.episodes / elapsed:.2f} ep/s  {self.tokens / elapsed:.0f} tok/s  "
            f"reward {self.reward / self.counted:.3f}"
        )


def _counted_reward(trajectory: Trajectory) -> float:
    """An episode's reward as the summary counts it: 0 for one that ended in an error."""
    return 0.0 if trajectory.error else trajectory.reward


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


def summarize(trajectories: list[Trajectory], k: int) -> dict[str, Any]:
    """Mean reward and score, pass@k when every score is 0 or 1, errors by cause, tokens, the
    mean of each `extra_logs` key over the episodes that logged it. An
    episode that ended in an error counts as reward and score 0, whatever it earned first."""
    n = len(trajectories)
    by_task: dict[str, list[float]] = {}
    for t in trajectories:
        by_task.setdefault(t.task_id, []).append(0.0 if t.error else t.success_score)
    scores = [s for group in by_task.values() for s in group]
    binary = n > 0 and all(s in (0.0, 1.0) for s in scores)
    pass_at: dict[str, float] | None = None
    if binary:
        pass_at = {}
        for j in sorted({1, k}):
            values = [_pass_at(len(g), int(sum(g)), j) for g in by_task.values() if len(g) >= j]
            if values:
                pass_at[f"pass@{j}"] = sum(values) / len(values)
    generated = sum(t.num_generated_tokens for t in trajectories)
    return {
        "episodes": n,
        "tasks": len(by_task),
        "mean_reward": sum(_counted_reward(t) for t in trajectories) / n if n else None,
        "mean_score": sum(scores) / n if n else None,
        "pass_at_k": pass_at,
        "terminated": sum(t.terminated for t in trajectories),
        "truncated": sum(t.truncated for t in trajectories),
        "errors": dict(Counter(t.error.cause for t in trajectories if t.error is not None)),
        "tokens": {
            "total": sum(len(t.tokens) for t in trajectories),
            "generated": generated,
            "mean_generated_per_episode": generated / n if n else None,
        },
        "mean_turns": sum(t.num_turns for t in trajectories) / n if n else None,
        "extra_logs": mean_extra_logs(trajectories),
    }


def _pass_at(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator of Chen et al. (2021) for n samples with c correct."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
