"""Episodes/s of a verifiers multi-turn env: verifiers' own evaluation against agenthub eval.

The same environment (the test suite's classic `MultiTurnEnv`, `vf_guess_color`: guess a color
in up to three tries, a hint after each wrong one), the same model (the embedded default),
served by one local vLLM OpenAI-compatible server, played the same number of episodes at the
same concurrency with the same reply budget and temperature, two ways:

- verifiers' own loop: `Environment.evaluate` with verifiers' client around an `AsyncOpenAI`
  (chat completions; the server applies the chat template), in a venv with verifiers' pins;
- `agenthub eval --base-url`: agenthub's episode runner, token ids in and out of the
  completions endpoint, verifiers' rollout loop and rubric driven through the adapter's bridge.

Each side runs as a user runs it, in a process of its own, so each time includes that
process's start (imports, loading the environment). To leave start-up out, each side also runs
one episode of each task (3), and its steady-state rate is the N - 3 episodes more over the
difference of the two times. Rounds alternate the order of the sides (ABBA): the machine is
shared. The last line is agenthub's steady-state episodes/s over verifiers' (target >= 1).

Episodes that fail (verifiers aborts a rollout on an empty reply, `EmptyModelResponseError`;
agenthub's typed episode errors) are counted by cause and printed for each side; they count in
their side's wall time but not as completed episodes, the same rule for both sides
(`_episode_counts.py`).

    python benchmarks/vs_verifiers.py [--samples 32] [--concurrency 16] [--rounds 2]
        [--verifiers-python PATH]

Without --verifiers-python it makes a venv with agenthub's `verifiers` extra (once, under
~/.cache/agenthub), which sees this interpreter's packages and keeps verifiers' own pins.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _episode_counts import (
    RULE,
    SideRun,
    add_failures,
    describe_failures,
    steady_rate,
    verifiers_failures,
    whole_rate,
)

from agenthub.testing._venvs import overlay_venv

# The suite's `vllm serve` launcher: the same server the eval tests share.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.vllm_server import vllm_serve

REPO = Path(__file__).resolve().parent.parent
ENV_ID = "vf_guess_color"
ENV_PATH = REPO / "tests" / "fixtures" / "hubs"  # where the environment's module is
TASKS = 3  # the environment's eval dataset has three rows


def verifiers_pin() -> str:
    """agenthub's `verifiers` extra, as the installed agenthub declares it."""
    from importlib.metadata import requires

    for requirement in requires("agenthub") or ():
        name, _, marker = requirement.partition(";")
        if "extra" in marker and '"verifiers"' in marker:
            return name.strip()
    raise SystemExit("the installed agenthub declares no `verifiers` extra; reinstall it")


def verifiers_python() -> Path:
    """A venv's python with the `verifiers` extra installed, seeing this interpreter's
    packages through a `.pth` file (verifiers' pins shadow ours there only); made once."""
    pin = verifiers_pin()
    where = Path.home() / ".cache" / "agenthub" / "bench-venvs" / pin.replace("==", "-")
    python = where / "bin" / "python"
    if python.exists():
        return python
    print(f"making a venv with {pin} in {where} (once)", flush=True)
    overlay_venv(where)
    subprocess.run([str(python), "-m", "pip", "install", "-qq", pin], check=True)
    return python


async def verifiers_side(args: argparse.Namespace) -> dict[str, object]:
    """verifiers' own evaluation of the environment (run in the verifiers venv). A rollout
    that verifiers aborted keeps its error in its output; those are counted by cause."""
    import verifiers as vf
    from openai import AsyncOpenAI

    env = vf.load_environment(ENV_ID)
    client = vf.clients.OpenAIChatCompletionsClient(
        AsyncOpenAI(base_url=args.url, api_key="none", max_retries=0)
    )
    start = time.perf_counter()
    results = await env.evaluate(
        client,
        args.model,
        sampling_args={"max_tokens": args.max_reply_tokens, "temperature": 1.0},
        num_examples=TASKS,
        rollouts_per_example=args.samples,
        max_concurrent=args.concurrency,  # rollouts in flight, as scored one by one below
        independent_scoring=True,
        on_progress=lambda *_: None,
    )
    seconds = time.perf_counter() - start
    outputs = results["outputs"]
    turns = [sum(m["role"] == "assistant" for m in o.get("completion") or ()) for o in outputs]
    return {
        "episodes": len(outputs),
        "failed": verifiers_failures(outputs),
        "evaluate_s": seconds,
        "mean_turns": statistics.mean(turns),
    }


def _env_with_path() -> dict[str, str]:
    path = [str(ENV_PATH), str(REPO), os.environ.get("PYTHONPATH", "")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def run_verifiers(
    args: argparse.Namespace, python: Path, url: str, model: Path, samples: int
) -> tuple[SideRun, dict[str, float]]:
    """verifiers' evaluation in a process of its own: the run, its mean turns and the seconds
    inside `evaluate()`."""
    command = [str(python), __file__, "--verifiers-side", "--url", url, "--model", str(model)]
    command += ["--samples", str(samples), "--concurrency", str(args.concurrency)]
    command += ["--max-reply-tokens", str(args.max_reply_tokens)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=_env_with_path())
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"verifiers' evaluation failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    run = SideRun(episodes=result["episodes"], seconds=seconds, failed=result["failed"])
    return run, {"mean_turns": result["mean_turns"], "evaluate_s": result["evaluate_s"]}


def run_agenthub(
    args: argparse.Namespace, python: Path, url: str, samples: int
) -> tuple[SideRun, dict[str, float]]:
    """`agenthub eval`, in the verifiers venv too: the adapter runs the installed verifiers.
    Its summary counts the episodes that ended in errors by cause (it exits 1 only when all
    did)."""
    with tempfile.TemporaryDirectory() as out:
        command = [str(python), "-m", "agenthub", "eval", "--env", "verifiers"]
        command += [f"env_id={ENV_ID}", "--base-url", url, "--model", "default"]
        command += ["--split", "held_out"]
        command += ["-n", str(TASKS), "-k", str(samples), "--concurrency", str(args.concurrency)]
        command += ["--max-reply-tokens", str(args.max_reply_tokens), "--temperature", "1.0"]
        command += ["--out", out]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=_env_with_path())
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"agenthub eval failed:\n{done.stderr[-4000:]}")
        summary = json.loads((Path(out) / "summary.json").read_text())
    run = SideRun(episodes=summary["episodes"], seconds=seconds, failed=summary["errors"])
    return run, {"mean_turns": summary["mean_turns"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=32, help="episodes per task (3 tasks)")
    parser.add_argument("--concurrency", type=int, default=16, help="episodes in flight")
    parser.add_argument("--max-reply-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--verifiers-python", type=Path, help="a python with verifiers installed")
    parser.add_argument("--verifiers-side", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.verifiers_side:
        print(json.dumps(asyncio.run(verifiers_side(args))))
        return

    from agenthub.agents.default_model import ensure_default_model

    python = args.verifiers_python or verifiers_python()
    model = ensure_default_model()
    episodes = TASKS * args.samples
    print(
        f"{os.cpu_count()} cores; {ENV_ID}: {TASKS} tasks x {args.samples} episodes, "
        f"{args.concurrency} in flight, up to 3 turns of {args.max_reply_tokens} tokens",
        flush=True,
    )
    sides: dict[str, Callable[[str, int], tuple[SideRun, dict[str, float]]]] = {
        "verifiers": lambda url, n: run_verifiers(args, python, url, model, n),
        "agenthub": lambda url, n: run_agenthub(args, python, url, n),
    }
    steady: dict[str, list[float]] = {name: [] for name in sides}
    whole: dict[str, list[float]] = {name: [] for name in sides}
    runs: dict[str, list[SideRun]] = {name: [] for name in sides}
    with (
        tempfile.TemporaryDirectory() as logs,
        vllm_serve(model, Path(logs) / "vllm.log", max_model_len=512, start_timeout_s=600) as url,
    ):
        sides["agenthub"](url, 1)  # warm-up: the server's first requests (not counted)
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for name in order:
                one, _ = sides[name](url, 1)
                many, more = sides[name](url, args.samples)
                if many.episodes != episodes:
                    raise SystemExit(f"{name} played {many.episodes} episodes, not {episodes}")
                runs[name] += [one, many]
                steady[name].append(steady_rate(one, many))
                whole[name].append(whole_rate(many))
                print(round_line(name, one, many, more), flush=True)
    summarize(runs, steady, whole)


def round_line(name: str, one: SideRun, many: SideRun, more: dict[str, float]) -> str:
    """One side's round: its N-episode run, failures and rates, and its run of one episode a
    task."""
    inner = (
        f", {many.completed / more['evaluate_s']:.2f} within evaluate()"
        if "evaluate_s" in more
        else ""
    )
    return (
        f"{name}: {many.episodes} episodes in {many.seconds:.1f} s, failed "
        f"{describe_failures(many.failed)} ({whole_rate(many):.2f} completed episodes/s{inner}; "
        f"start-up and one episode a task {one.seconds:.1f} s, failed "
        f"{describe_failures(one.failed)}; "
        f"steady {steady_rate(one, many):.2f} episodes/s; "
        f"{more['mean_turns']:.2f} turns an episode)"
    )


def summarize(
    runs: dict[str, list[SideRun]], steady: dict[str, list[float]], whole: dict[str, list[float]]
) -> None:
    """Each side's failures, how they are counted, the rates; the ratio last."""
    for name, played in runs.items():
        total = sum(r.episodes for r in played)
        print(f"failed episodes, {name}: {describe_failures(add_failures(played))} of {total}")
    print(RULE)
    mean = {name: statistics.mean(v) for name, v in steady.items()}
    mean_whole = {name: statistics.mean(v) for name, v in whole.items()}
    if not mean["verifiers"] or not mean_whole["verifiers"]:
        raise SystemExit(
            "verifiers completed no episode, so there is no ratio: see the failures above "
            "(is the vLLM server answering?)"
        )
    print(
        f"whole command, start-up included: agenthub {mean_whole['agenthub']:.2f} / verifiers "
        f"{mean_whole['verifiers']:.2f} episodes/s = "
        f"{mean_whole['agenthub'] / mean_whole['verifiers']:.2f}"
    )
    print(
        f"steady state: agenthub {mean['agenthub']:.2f} / verifiers {mean['verifiers']:.2f} "
        "episodes/s"
    )
    ratio = mean["agenthub"] / mean["verifiers"]
    print(f"vs_verifiers: episodes/s agenthub / verifiers = {ratio:.2f}")


if __name__ == "__main__":
    main()
