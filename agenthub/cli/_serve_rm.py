"""`agenthub serve-rm`: a reward server speaking OpenRLHF's `/get_reward` protocol."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agenthub._errors import AgentHubError
from agenthub._listen import listen, run_app


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command's arguments (kept light: nothing heavy is imported here)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--reward-func", metavar="FILE", help="an OpenRLHF reward_func file")
    source.add_argument(
        "--model",
        metavar="DIR",
        help="a transformers sequence-classification model directory, or an OpenRLHF reward model",
    )
    parser.add_argument(
        "--reward-processes",
        type=int,
        metavar="N",
        help="worker processes for --reward-func, each importing it (default: one per core, up "
        "to 4; 0: a thread); each scores a batch at a time",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=5000, help="port to listen on")
    parser.add_argument("--max-batch-size", type=int, default=64, help="samples per batch")
    parser.add_argument("--device", default="cpu", help="torch device for --model")
    parser.add_argument("--max-length", type=int, default=2048, help="tokens per query (--model)")


def serve_rm_command(args: argparse.Namespace) -> int:
    check_arguments(args)
    listener = listen(args.host, args.port)
    from agenthub.envs.judge._rm_model import load_model_scorer
    from agenthub.envs.judge._rm_server import Scorer, build_app
    from agenthub.envs.reward_func import load_reward_func

    scorer: Scorer
    needs_labels, concurrency = False, 1
    if args.reward_func:
        function = load_reward_func(args.reward_func, processes=args.reward_processes)
        scorer, needs_labels = function, function.takes_labels
        concurrency = max(1, function.processes)  # a thread is one at a time, as OpenRLHF's
        name = f"reward function {args.reward_func}"
    else:
        model = load_model_scorer(args.model, device=args.device, max_length=args.max_length)
        scorer, name = model, f"{model.kind} {args.model}"
    app = build_app(
        scorer,
        name=name,
        max_batch_size=args.max_batch_size,
        needs_labels=needs_labels,
        concurrency=concurrency,
    )
    print(
        f"agenthub serve-rm: {name} on http://{args.host}:{args.port}/get_reward "
        "(GET /health); Ctrl-C stops",
        file=sys.stderr,
        flush=True,
    )
    run_app(app, listener)
    return 0


def check_arguments(args: argparse.Namespace) -> None:
    """Mistakes in the command line, found before a model is loaded (which takes a while)."""
    if not 1 <= args.port <= 65535:  # uvicorn would hang on it without a word
        raise AgentHubError(f"--port {args.port}: give a port from 1 to 65535")
    for flag, value in (
        ("--max-batch-size", args.max_batch_size),
        ("--max-length", args.max_length),
    ):
        if value < 1:
            raise AgentHubError(f"{flag} {value}: give a number of at least 1")
    if args.reward_processes is not None and (args.reward_processes < 0 or args.model):
        raise AgentHubError(
            f"--reward-processes {args.reward_processes}: give 0 (a thread) or more worker "
            "processes, with --reward-func"
        )
    if args.model and not (Path(args.model) / "config.json").is_file():
        raise AgentHubError(
            f"--model {args.model}: no config.json there; give a local Hugging Face "
            "sequence-classification model directory"
        )
