from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agenthub._env import Env
from agenthub._errors import (
    AgentHubError,
    CheckEnvError,
    NoTaskSourceError,
    PluginLoadError,
    TaskFileError,
)
from agenthub._pairs import parse_kwargs
from agenthub._registry import list_envs, load_entry_point, make, spec
from agenthub._spec import EnvSpec


def add_env_arguments(parser: argparse.ArgumentParser, *, classes: bool = True) -> None:
    """`--env ID` and the env's `KEY=VALUE` arguments, as every command that makes an env
    takes them; `classes`: the id may also be a 'package.module:Attr' env class."""
    about = "environment id"
    if classes:
        about += ", or 'package.module:Attr' for an env class not registered"
    parser.add_argument("--env", required=True, metavar="ID", help=about)
    parser.add_argument(
        "env_kwargs", nargs="*", metavar="KEY=VALUE", help="environment arguments (JSON values)"
    )


def describe(env_id: str) -> tuple[str, bool]:
    """The first paragraph of the env's docstring, or why it cannot load (an id that several
    packages declare among them); and whether it loaded."""
    try:
        target = load_entry_point(spec(env_id))
    except PluginLoadError as exc:
        return str(exc), False
    return _summary(target), True


def _summary(target: Any) -> str:
    """The first paragraph of `target`'s docstring, on one line."""
    return " ".join((inspect.getdoc(target) or "").split("\n\n")[0].split())


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
        # A docstring is not markup: "agenthub[reasoning-gym]" would lose its bracket.
        described = escape(text) if ok else f"[red]{escape(text)}[/red]"
        table.add_row(escape(s.id), escape(s.package or "(registered)"), described)
    Console(soft_wrap=False).print(table)
    return 0 if all(ok for *_, ok in rows) else 1


def env_arguments(factory: Any, registered: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """What `make` passes on to `factory`: each argument's name, type, default (the registered
    one where the spec sets it) and the docstring's `Args:` text for it; and whether it also
    takes any other (`**kwargs`). A class whose `__init__` takes `**kwargs` is taken to pass
    them on to its base class's, whose arguments are listed too."""
    from agenthub.tools._schema import split_docstring

    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):
        return [], True
    constructor = factory.__init__ if isinstance(factory, type) else None  # type: ignore[misc]
    described = {**split_docstring(factory)[1], **split_docstring(constructor)[1]}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters)
    for base in factory.__mro__[1:] if isinstance(factory, type) and takes_any else ():
        init = base.__dict__.get("__init__")
        if init is None:
            continue
        if base is object or base is Env:
            break  # Env's own constructor takes nothing a user gives
        try:
            inherited = list(inspect.signature(init).parameters.values())[1:]  # without self
        except (TypeError, ValueError):
            break
        named = {p.name for p in parameters}
        parameters += [p for p in inherited if p.name not in named]
        described = {**split_docstring(base)[1], **split_docstring(init)[1], **described}
        takes_any = any(p.kind is p.VAR_KEYWORD for p in inherited)
        if not takes_any:
            break
    arguments = []
    for p in parameters:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        required = p.default is p.empty and p.name not in registered
        default = registered.get(p.name, None if required else p.default)
        attribute = getattr(factory, p.name, None)
        if default is None and isinstance(attribute, str | int | float):
            default = attribute  # `max_turns=None` meaning the class's `max_turns = 3`
        arguments.append(
            {
                "name": p.name,
                "type": _annotation(p.annotation),
                "default": default,
                "required": required,
                "description": described.get(p.name, ""),
            }
        )
    return arguments, takes_any


def _annotation(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


@dataclass(frozen=True)
class EnvDescription:
    """What `agenthub envs show` says of an env (its `--json` object, in this order)."""

    id: str
    package: str | None
    entry_point: str
    source: str | None
    description: str
    arguments: list[dict[str, Any]]
    takes_any_argument: bool
    tools: list[dict[str, str]]
    stop: list[str]
    system_prompt: str | None
    known_ids: dict[str, bool] | None
    """The ids an adapter to another hub can run, each mapped to whether it runs offline (the
    env's `known_ids()`); None for an env without that hook."""
    known_ids_error: str | None
    """Why they could not be listed (the package they come from is not installed)."""

    @classmethod
    def of(cls, env_spec: EnvSpec, factory: Any) -> EnvDescription:
        arguments, takes_any = env_arguments(factory, env_spec.kwargs)
        stop = getattr(factory, "stop", ())
        system_prompt = getattr(factory, "system_prompt", None)
        try:
            source = inspect.getsourcefile(factory)
        except TypeError:
            source = None
        ids, ids_error = known_ids(factory)
        return cls(
            id=env_spec.id,
            package=env_spec.package,
            entry_point=env_spec.entry_point,
            source=source,
            description=inspect.getdoc(factory) or "",
            arguments=arguments,
            takes_any_argument=takes_any,
            tools=[
                {"name": f.__name__, "description": _summary(f)}
                for f in getattr(factory, "functions", ())
                if callable(f)
            ],
            stop=list(stop) if isinstance(stop, list | tuple) else [],
            system_prompt=system_prompt if isinstance(system_prompt, str) else None,
            known_ids=ids,
            known_ids_error=ids_error,
        )


def known_ids(factory: Any) -> tuple[dict[str, bool] | None, str | None]:
    """The optional class hook `known_ids()`: an env that runs the envs of another package
    (TextArena's games, gem's) defines it as a static or class method returning
    `{id: runs_offline}`, and `agenthub envs show` lists those ids, offline ones apart from
    those that need the network. Returns (None, None) for an env without the hook, and
    (None, why) where the hook raised an `AgentHubError` (its package is not installed)."""
    hook = getattr(factory, "known_ids", None)
    if not callable(hook):
        return None, None
    try:
        ids = hook()
    except AgentHubError as exc:
        return None, str(exc)
    return {str(env_id): bool(offline) for env_id, offline in dict(ids).items()}, None


def show_command(args: argparse.Namespace) -> int:
    find_local_envs(args.env_id)
    env_spec = spec(args.env_id)
    shown = EnvDescription.of(env_spec, load_entry_point(env_spec))
    if args.json:
        print(json.dumps(asdict(shown), default=repr))
        return 0
    console = Console(soft_wrap=True)  # the docstring keeps its own lines
    _print_header(console, shown)
    _print_arguments(console, shown)
    _print_conduct(console, shown)
    _print_known_ids(console, shown)
    return 0


def _print_header(console: Console, shown: EnvDescription) -> None:
    where = "" if shown.entry_point == shown.id else f"  {shown.entry_point}"
    console.print(f"[bold]{escape(shown.id)}[/bold]{escape(where)}", highlight=False)
    origin = [f"package {shown.package}" if shown.package else "", shown.source or ""]
    console.print(", ".join(filter(None, origin)), style="dim", markup=False, highlight=False)
    console.print()
    console.print(shown.description or "(no docstring)", markup=False, highlight=False)
    console.print()


def _print_arguments(console: Console, shown: EnvDescription) -> None:
    arguments = shown.arguments
    if arguments:
        table = Table(title="Arguments (KEY=VALUE, the value as JSON)", title_justify="left")
        table.add_column("argument", style="bold")
        table.add_column("type")
        table.add_column("default")
        if any(a["description"] for a in arguments):
            table.add_column("description")
        for a in arguments:
            default = "[red]required[/red]" if a["required"] else escape(_shorten(a["default"]))
            row = [a["name"], escape(a["type"]), default]
            table.add_row(*row, *([escape(a["description"])] if len(table.columns) > 3 else []))
        console.print(table)
    else:
        console.print("It takes no arguments.")
    if shown.takes_any_argument:
        console.print("It also takes arguments not listed here (**kwargs).")


def _print_conduct(console: Console, shown: EnvDescription) -> None:
    """Its system prompt, where a reply ends, and the tools the model may call."""
    if shown.system_prompt is not None:
        console.print()
        console.print("Its system prompt (before a task's prompt that has none of its own):")
        console.print(shown.system_prompt, markup=False, highlight=False)
    if shown.stop:
        console.print()
        stop = escape(json.dumps(shown.stop))
        console.print(f"A reply ends where it writes: {stop}", highlight=False)
    if shown.tools:
        console.print()
        console.print("Tools the model may call:")
        width = max(len(tool["name"]) for tool in shown.tools)
        for tool in shown.tools:
            name = tool["name"].ljust(width)
            console.print(f"  [bold]{name}[/bold]  {escape(tool['description'])}")


def _print_known_ids(console: Console, shown: EnvDescription) -> None:
    if shown.known_ids_error is not None:
        console.print()
        console.print(f"Its ids cannot be listed: {shown.known_ids_error}", markup=False)
    if shown.known_ids is None:
        return
    offline = [env_id for env_id, runs in shown.known_ids.items() if runs]
    online = [env_id for env_id, runs in shown.known_ids.items() if not runs]
    for ids, what in ((offline, "it can run offline"), (online, "that need the network")):
        console.print()
        console.print(f"Ids {what} ({len(ids)}; env_id=ID):", highlight=False)
        console.print(f"  {', '.join(ids) or '(none)'}", markup=False, highlight=False)


def _shorten(value: Any, width: int = 48) -> str:
    text = json.dumps(value) if isinstance(value, str | int | float | bool | None) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


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


def check_command(args: argparse.Namespace) -> int:
    from agenthub.envs._tasks import read_task_file
    from agenthub.testing import check_env
    from agenthub.testing._check_env import on_blocked_loop

    if not args.timeout > 0:
        raise AgentHubError(f"--timeout {args.timeout:g}: must be above 0")
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

    def give_up(error: CheckEnvError) -> None:
        # On the watchdog's thread, while the env's call still blocks the loop: nothing can
        # end that call, and a normal exit could wait on it, or die at shutdown on a lock it
        # holds (stdin's, in `input()`). Said and flushed, the process ends here.
        console.print(f"[red]FAIL[/red] {error}", highlight=False)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    try:
        with on_blocked_loop(give_up):
            check_env(env, tasks=tasks, timeout_s=args.timeout)
    except CheckEnvError as exc:
        console.print(f"[red]FAIL[/red] {exc}", highlight=False)
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
    except TaskFileError:
        raise
    except Exception:
        return True  # a bug in tasks(): check_env names it, and the line it was raised at
    return True
