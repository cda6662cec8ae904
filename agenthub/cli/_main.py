from __future__ import annotations

import argparse
import difflib
import importlib
import os
import select
import stat
import sys
from collections.abc import Callable, Sequence

from agenthub._errors import AgentHubError
from agenthub.cli._bench import add_arguments as bench_arguments
from agenthub.cli._config import add_parser as add_config_parser
from agenthub.cli._eval import add_arguments as eval_arguments
from agenthub.cli._export import add_arguments as export_arguments
from agenthub.cli._model import add_model_parser
from agenthub.cli._repl import add_arguments as repl_arguments
from agenthub.cli._sandbox import add_parser as add_sandbox_parser
from agenthub.cli._serve import add_arguments as serve_arguments
from agenthub.cli._serve_rm import add_arguments as serve_rm_arguments
from agenthub.cli._train import add_arguments as train_arguments
from agenthub.cli._view import add_arguments as view_arguments

Handler = Callable[[argparse.Namespace], int]


def _version() -> str:
    from agenthub import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agenthub",
        description="Write, check, debug, evaluate and train on LLM environments.",
    )
    parser.add_argument("--version", action="version", version=f"agenthub {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in ("envs", "env"):
        _add_envs_parser(commands, group)
    _add_integrations(commands)
    add_sandbox_parser(commands)
    add_config_parser(commands)
    _add_command(
        commands,
        "eval",
        "agenthub.cli._eval:eval_command",
        eval_arguments,
        help="evaluate a model on an environment (vLLM in-process or an OpenAI-compatible server)",
    )
    add_model_parser(commands)
    _add_command(
        commands,
        "train",
        "agenthub.cli._train:train_command",
        train_arguments,
        help="train a model on an environment with asynchronous off-policy RL",
        description="Train with rollout workers (vLLM) and a DeepSpeed learner on Ray. "
        "Configure with --config TOML files and KEY=VALUE overrides; the resolved config, "
        "metrics.jsonl, reward.png and checkpoints go to --out.",
    )
    _add_command(
        commands,
        "repl",
        "agenthub.cli._repl:repl_command",
        repl_arguments,
        help="step through an environment by hand, as a person or with a model",
    )
    _add_command(
        commands,
        "view",
        "agenthub.cli._view:view_command",
        view_arguments,
        help="look at runs in the browser: episodes, curves",
    )
    _add_command(
        commands,
        "bench",
        "agenthub.cli._bench:bench_command",
        bench_arguments,
        help="list or run the performance scripts under benchmarks/ (each prints its ratio last)",
    )
    return parser


def _add_integrations(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _add_command(
        commands,
        "serve",
        "agenthub.cli._serve:serve_command",
        serve_arguments,
        help="serve an environment over the OpenEnv protocol, for other trainers' clients",
    )
    _add_command(
        commands,
        "serve-rm",
        "agenthub.cli._serve_rm:serve_rm_command",
        serve_rm_arguments,
        help="serve a reward function or reward model over the OpenRLHF HTTP protocol",
    )
    _add_command(
        commands,
        "export",
        "agenthub.cli._export:export_command",
        export_arguments,
        help="write an environment in the form another trainer loads (openrlhf: an agent file)",
    )


def _add_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    *,
    help: str,
    description: str | None = None,
) -> None:
    """A command whose arguments `add_arguments` adds and which `handler` ("module:function",
    imported when the command runs) carries out."""
    command = commands.add_parser(name, help=help, description=description)
    add_arguments(command)
    command.set_defaults(handler=handler)


def _add_envs_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], group: str
) -> None:
    envs = commands.add_parser(
        group,
        help="list, describe, check and scaffold environments"
        if group == "envs"
        else "alias of envs",
    )
    actions = envs.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list installed environments")
    listing.add_argument("--json", action="store_true", help="print JSON lines")
    listing.set_defaults(handler="agenthub.cli._envs:list_command")
    show = actions.add_parser(
        "show", help="describe an env: its docstring, the arguments it takes, its tools"
    )
    show.add_argument("env_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(handler="agenthub.cli._envs:show_command")
    check = actions.add_parser("check", help="run agenthub.testing.check_env on an env")
    check.add_argument("env_id", metavar="ID")
    check.add_argument(
        "kwargs", nargs="*", metavar="KEY=VALUE", help="environment arguments (JSON values)"
    )
    check.add_argument("--tasks", metavar="FILE", help="JSONL task file to check with")
    check.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds each call of the env may take, blocking the event loop included "
        "(default: 60)",
    )
    check.set_defaults(handler="agenthub.cli._envs:check_command")
    init = actions.add_parser("init", help="scaffold a plugin package for a new env")
    init.add_argument("name", help="environment id and package name, e.g. guess-number")
    init.add_argument("--dir", default=None, help="where to create it (default: ./NAME)")
    init.add_argument(
        "--tools",
        action="store_true",
        help="the example env lets the model call Python functions (agenthub.tools.ToolEnv)",
    )
    init.set_defaults(handler="agenthub.cli._scaffold:init_command")


def _handler(name: str) -> Handler:
    """The command's function, "module:function" as its parser names it."""
    module, _, attr = name.partition(":")
    handler: Handler = getattr(importlib.import_module(module), attr)
    return handler


# Where each command keeps its KEY=VALUE arguments.
_PAIRS = ("overrides", "env_kwargs", "kwargs")


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse `argv`, taking KEY=VALUE arguments wherever they stand: argparse alone takes one
    run of positionals, so `train --env X a=1 --steps 3 b=2` would reject `b=2`."""
    args, unknown = parser.parse_known_args(argv)
    pairs = next(
        (getattr(args, d) for d in _PAIRS if isinstance(getattr(args, d, None), list)), None
    )
    rest = []
    for item in unknown:
        if pairs is not None and "=" in item and not item.startswith("-"):
            pairs.append(item)
        else:
            rest.append(item)
    if rest:
        # Said by the command's own parser, so its usage is shown, with the nearest flag.
        command = _command_parser(parser, args)
        flags = [flag for action in command._actions for flag in action.option_strings]
        hints = [
            f"{given}: did you mean {close[0]}?"
            for given in (item.split("=", 1)[0] for item in rest if item.startswith("-"))
            if (close := difflib.get_close_matches(given, flags, n=1))
        ]
        command.error("; ".join([f"unrecognized arguments: {' '.join(rest)}", *hints]))
    return args


def _command_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The (sub)parser of the command `args` holds, e.g. `agenthub envs check`'s."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        chosen = None if sub is None else sub.choices.get(str(getattr(args, sub.dest, "")))
        if chosen is None:
            return parser
        parser = chosen


def error_message(exc: AgentHubError) -> str:
    """What the person is told. An error raised on purpose inside a Ray actor arrives as Ray's
    wrapper of it, whose text is the actor's whole traceback: the message is the error's own."""
    cause = getattr(exc, "cause", None)
    return str(cause if isinstance(cause, AgentHubError) else exc)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    handler = _handler(args.handler)
    try:
        code = handler(args)
        sys.stdout.flush()  # a reader gone by now fails here, not in the flush at exit
        return code
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise  # some other pipe broke (a subprocess's, say): a failure to see, not quiet
        # The reader (`| head`) closed the pipe: it has what it wanted, and the rest of the
        # output has no one to go to. Python's recipe: point stdout at devnull, so the flush at
        # exit does not raise again, and exit 1, since the command stopped before it finished
        # (a `set -o pipefail` script sees it, as it would a C tool's SIGPIPE).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except AgentHubError as exc:
        print(f"agenthub: error: {error_message(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("agenthub: interrupted", file=sys.stderr)
        return 130


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reading end is closed (poll reports an error
    or a hang-up on it; a reader that is only slow leaves it merely unwritable)."""
    try:
        fd = sys.stdout.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):  # replaced by one with no file behind it
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))


if __name__ == "__main__":
    sys.exit(main())
