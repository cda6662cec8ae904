"""`agenthub repl`: step through an environment by hand, as a person or with a model."""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import sys
from pathlib import Path

import anyio
from rich.console import Console
from rich.text import Text

from agenthub._pairs import parse_kwargs
from agenthub.agents import InferenceEngine, SamplingParams
from agenthub.agents._engines import interruptible_start, resolve_model
from agenthub.cli._envs import add_env_arguments, find_local_envs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_env_arguments(parser)
    parser.add_argument("--task", type=int, default=0, metavar="N", help="task index (0)")
    parser.add_argument("--split", default="held_out", choices=["train", "held_out"])
    parser.add_argument("--tasks", default=None, metavar="FILE", help="JSONL task file")
    parser.add_argument(
        "--model",
        default="default",
        metavar="PATH|default",
        help="local model directory, or 'default' for the embedded default model; its "
        "tokenizer tokenizes the episode, and :gen loads it into vLLM on first use",
    )
    parser.add_argument("--seed", type=int, default=0, help="the env's reset seed (0)")
    parser.add_argument(
        "--max-reply-tokens", type=int, default=256, metavar="R", help="tokens per :gen reply"
    )
    parser.add_argument(
        "--no-chat-template",
        dest="chat_template",
        action="store_false",
        help="tokenize text prompts as they are (prompts already templated, base models)",
    )


def repl_command(args: argparse.Namespace) -> int:
    from agenthub.agents import ChatTokenizer
    from agenthub.repl import Repl, probe_env, run_terminal

    console = Console(highlight=False)
    env_kwargs = parse_kwargs(args.env_kwargs)
    # A wrong env id or argument fails before the model loads (or, on a first run, is built).
    find_local_envs(args.env)
    anyio.run(probe_env, args.env, env_kwargs)
    model = resolve_model(args.model, needed=True)
    assert model is not None
    with console.status("loading the tokenizer..."):
        chat = ChatTokenizer.from_pretrained(model)

    repl = Repl(
        env=args.env,
        env_kwargs=env_kwargs,
        task_index=args.task,
        seed=args.seed,
        chat=chat,
        sampling=SamplingParams(max_tokens=args.max_reply_tokens),
        console=console,
        engine_factory=functools.partial(_start_engine, model, args.seed),
        tasks_file=args.tasks,
        split=args.split,
        chat_template=args.chat_template,
    )
    console.print(
        Text(f"agenthub repl: env {args.env}, model {_name(model)}", style="bold"), markup=False
    )
    return run_terminal(repl)


async def _start_engine(model: Path, seed: int) -> InferenceEngine:
    """vLLM for the REPL's `:gen`, started on its first use."""
    # vLLM's start-up log would bury the episode; VLLM_LOGGING_LEVEL=INFO brings it back.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    # The engine core runs in a process group of its own, so a Ctrl-C typed later (at the
    # prompt, or to stop a reply) leaves it running. One typed while it starts is the
    # REPL's first Ctrl-C (the entry stops, once the model is up, and the model stays
    # loaded); a second quits, as raising KeyboardInterrupt into vLLM's start-up would
    # leave it waiting minutes for an engine that no longer answers.
    heard = False
    entry_stops = signal.getsignal(signal.SIGINT)

    def forgive() -> None:
        nonlocal heard
        heard = True
        print(
            "\nthe model is still loading: this entry stops once it is up "
            "(Ctrl-C again quits the REPL)",
            file=sys.stderr,
            flush=True,
        )
        if callable(entry_stops):
            entry_stops(signal.SIGINT, None)

    # vLLM's import (seconds, more on a busy machine) is inside: a Ctrl-C typed while it runs
    # is the start's too, not an interrupt that drops the load.
    with interruptible_start(quitting="the REPL quits, its episode unsaved", forgive=forgive):
        # Said once Ctrl-C is the start's: one typed before this line stops the entry at once.
        print(
            "(Ctrl-C stops this entry once the model is up; twice quits the REPL)",
            file=sys.stderr,
            flush=True,
        )
        from agenthub.agents import VLLMEngine

        try:
            return VLLMEngine(model, seed=seed, max_num_seqs=1, own_process_group=True)
        except Exception as exc:
            if heard:  # a start cut short by the Ctrl-C: the entry was interrupted
                raise asyncio.CancelledError from exc
            raise


def _name(model: Path) -> str:
    return model.name
