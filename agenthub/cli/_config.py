"""`agenthub config from-openrlhf`: an OpenRLHF `train_ppo_ray` command as a training config."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from agenthub._errors import AgentHubError

_EXAMPLE = (
    "agenthub config from-openrlhf -- --advantage_estimator group_norm "
    "--n_samples_per_prompt 8 --init_kl_coef 0.01 --use_kl_loss --kl_estimator k3"
)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = commands.add_parser("config", help="translate other frameworks' training settings")
    actions = config.add_subparsers(dest="action", metavar="ACTION", required=True)
    convert = actions.add_parser(
        "from-openrlhf",
        help="write the agenthub training config (TOML) an OpenRLHF train_ppo_ray command means",
        description="Translate OpenRLHF train_ppo_ray flags (--init_kl_coef or --algo.kl."
        "init_coef) into a TOML file for `agenthub train --config`, listing each flag that has "
        f"no equivalent with the reason. Example: {_EXAMPLE}",
    )
    convert.add_argument(
        "--file",
        metavar="SCRIPT",
        default=None,
        help="a shell script or text file holding the command ('-': standard input)",
    )
    convert.add_argument(
        "--out", metavar="FILE", default=None, help="write the TOML here (default: print it)"
    )
    convert.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- FLAGS",
        help="the command's flags after `--` (or the whole `python3 -m "
        "openrlhf.cli.train_ppo_ray ...` command)",
    )
    convert.set_defaults(handler="agenthub.cli._config:from_openrlhf_command")


def from_openrlhf_command(args: argparse.Namespace) -> int:
    from agenthub.trainer._config import load_config
    from agenthub.trainer._openrlhf_flags import split_command, translate

    if args.file is not None and args.command:
        raise AgentHubError("give the OpenRLHF command either after -- or with --file, not both")
    if args.file is not None:
        text = sys.stdin.read() if args.file == "-" else _read(Path(args.file))
    elif args.command:
        text = shlex.join(args.command)
    else:
        raise AgentHubError(f"give the OpenRLHF command's flags after --, e.g. {_EXAMPLE}")
    try:
        translation = translate(split_command(text))
    except ValueError as exc:
        raise AgentHubError(f"cannot translate the OpenRLHF command: {exc}") from None
    toml = translation.toml()
    out = Path(args.out) if args.out else None
    if out is not None:
        out.write_text(toml, encoding="utf-8")
        # Checked as `agenthub train --config` reads it; the env, if the command names none,
        # is given at train time.
        base = None if "env" in translation.settings else {"env": "reward_func"}
        load_config([out], base=base)
        print(f"wrote {out}")
        for item in translation.unmapped:
            print(f"not translated: {item.flag}: {item.reason}")
        for note in translation.notes:
            print(f"note: {note}")
    else:
        sys.stdout.write(toml)
    untranslated = len(translation.unmapped)
    print(
        f"{untranslated} flag{'s' * (untranslated != 1)} not translated (listed "
        f"{'above' if out else 'in the comments'}); train with "
        f"agenthub train --config {out or 'FILE'}",
        file=sys.stderr,
    )
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AgentHubError(f"--file {path} does not exist") from None
