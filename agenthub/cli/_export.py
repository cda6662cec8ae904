"""`agenthub export`: an agenthub env in the form another trainer loads."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agenthub._errors import AgentHubError
from agenthub._pairs import parse_kwargs
from agenthub.cli._envs import add_env_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "format",
        choices=["openrlhf"],
        help="openrlhf: an --agent_func_path file whose AgentExecutor plays the env",
    )
    add_env_arguments(parser)
    parser.add_argument(
        "-o", "--out", required=True, metavar="FILE", help="the file to write (agent_func.py)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")


def export_command(args: argparse.Namespace) -> int:
    from agenthub.cli._envs import find_local_envs
    from agenthub.integrations.openenv_server import ServeConfig, check_buildable
    from agenthub.integrations.openrlhf import agent_file

    out = Path(args.out)
    if out.exists() and not args.force:
        raise AgentHubError(f"--out {out} exists: give another path, or --force to overwrite it")
    env_kwargs = parse_kwargs(args.env_kwargs)
    find_local_envs(args.env)
    check_buildable(ServeConfig(env_id=args.env, env_kwargs=env_kwargs))
    out.write_text(agent_file(args.env, env_kwargs, name=out.name), encoding="utf-8")
    print(
        f"wrote {out}: pass it to OpenRLHF as --agent_func_path {out} (agenthub must be "
        "installed where OpenRLHF's rollout workers run)",
        file=sys.stderr,
    )
    return 0
