"""`agenthub model init`: build the embedded default model."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console


def add_model_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    model = commands.add_parser("model", help="build the embedded default model")
    actions = model.add_subparsers(dest="action", metavar="ACTION", required=True)
    init = actions.add_parser(
        "init",
        help="build the default model (tokenizer, small Qwen2 LM, warm start) offline",
        description="Build the default model deterministically and offline, into the cache "
        "(default) or into --out DIR, and print the directory it is in.",
    )
    init.add_argument("--out", metavar="DIR", help="build into DIR instead of the cache")
    init.add_argument("--force", action="store_true", help="rebuild even if already built")
    init.add_argument(
        "--env",
        dest="env_ids",
        action="append",
        metavar="ID",
        help="draw demonstrations from this environment (repeatable; default: code_exec, math)",
    )
    init.set_defaults(handler="agenthub.cli._model:init_command")


def init_command(args: argparse.Namespace) -> int:
    from agenthub.agents.default_model import (
        MANIFEST,
        DefaultModelConfig,
        RichBuildProgress,
        build_default_model,
        ensure_default_model,
    )

    config = (
        DefaultModelConfig(env_ids=tuple(args.env_ids)) if args.env_ids else DefaultModelConfig()
    )
    console = Console(stderr=True)
    start, cpu_start = time.perf_counter(), time.process_time()
    with RichBuildProgress(console) as progress:
        if args.out:
            path = build_default_model(Path(args.out), config, progress=progress, force=args.force)
        else:
            path = ensure_default_model(config=config, progress=progress, force=args.force)
    manifest = json.loads((path / MANIFEST).read_text())
    loss = manifest["sft_loss"]
    console.print(
        f"default model: {manifest['parameters']:,} parameters, "
        f"{manifest['demonstrations']['used']} demonstrations"
        + (f", SFT loss {loss['first']:.3f} -> {loss['last']:.3f}" if loss else "")
        + f" ({time.perf_counter() - start:.0f} s, {time.process_time() - cpu_start:.0f} s CPU)"
    )
    print(path)
    return 0
