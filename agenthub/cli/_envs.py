from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from agenthub._env import Env
from agenthub._errors import (
    AgentHubError,
    CheckEnvError,
    NoTaskSourceError,
    PluginLoadError,
    TaskFileError,
)
from agenthub._registry import list_envs, load_entry_point, make, spec


def describe(env_id: str) -> tuple[str, bool]:
    """The first line of the env's docstring, or why it cannot load (an id that several
    packages declare among them); and whether it loaded."""
    try:
        target = load_entry_point(spec(env_id))
    except PluginLoadError as exc:
        return str(exc), False
    doc = (target.__doc__ or "").strip()
    return (doc.splitlines()[0] if doc else ""), True


def list_command(args: argparse.Namespace) -> int:
    specs = list_envs()
    rows = [(s, *describe(s.id)) for s in specs]
    if args.json:
        for s, text, ok in rows:
            print(
                json.dumps(
                    {
                        "id": s.id,
                        "package": s.package,
                        "entry_point": s.entry_point,
                        "description": text if ok else None,
                        "error": None if ok else text,
                    }
                )
            )
        return 0 if all(ok for *_, ok in rows) else 1
    table = Table(title=f"{len(specs)} environments", title_justify="left")
    table.add_column("id", style="bold")
    table.add_column("package")
    table.add_column("description")
    for s, text, ok in rows:
        table.add_row(s.id, s.package or "(registered)", text if ok else f"[red]{text}[/red]")
    Console(soft_wrap=False).print(table)
    return 0 if all(ok for *_, ok in rows) else 1


def find_local_envs(env_id: str) -> None:
    """Let an env named `package.module:Attr` come from the working directory, as it would
    under `python -m`. Ray hands its workers this process's `sys.path`, so they find it too."""
    here = str(Path.cwd())
    if ":" in env_id and here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def run_dir(command: str, env_id: str) -> Path:
    """The default output directory of `command` on `env_id`: `runs/COMMAND-ID`, an id
    `package.module:Attr` written `package.module.Attr`."""
    return Path("runs") / f"{command}-{env_id.replace(':', '.').replace(os.sep, '.')}"


def parse_pair(pair: str) -> tuple[str, Any]:
    """`KEY=VALUE`, the value as JSON when it parses (numbers, booleans, lists), else text."""
    key, sep, raw = pair.partition("=")
    if not sep or not key:
        raise AgentHubError(f"argument {pair!r} must look like KEY=VALUE")
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw


def parse_kwargs(pairs: list[str]) -> dict[str, Any]:
    return dict(parse_pair(pair) for pair in pairs)


def check_command(args: argparse.Namespace) -> int:
    from agenthub.envs._tasks import read_task_file
    from agenthub.testing import check_env

    kwargs = parse_kwargs(args.kwargs)
    find_local_envs(args.env_id)
    env = make(args.env_id, **kwargs)
    try:
        tasks = list(read_task_file(args.tasks, kwargs))[:2] if args.tasks else None
        if tasks == []:
            raise TaskFileError(
                f"no tasks to check: task file {args.tasks} holds none; give one JSON task per line"
            )
        if tasks is None and not _has_own_tasks(env):
            raise AgentHubError(
                f"{args.env_id} has no tasks of its own to check with: pass --tasks FILE (one "
                '{"prompt": ..., "label": ...} per line), or the env\'s dataset=FILE argument'
            )
    except BaseException:
        anyio.run(env.aclose)
        raise
    console = Console(stderr=True)
    try:
        check_env(env, tasks=tasks)
    except CheckEnvError as exc:
        console.print(f"[red]FAIL[/red] {exc}")
        return 1
    console.print(f"[green]OK[/green] {args.env_id} keeps the agenthub Env contract")
    return 0


def _has_own_tasks(env: Env[Any]) -> bool:
    """Whether the env has train tasks. A task file of its arguments that is missing or
    malformed raises its `TaskFileError` here: the user's to fix, not a broken contract."""
    try:
        next(iter(env.tasks("train")), None)
    except NoTaskSourceError:
        return False
    return True
