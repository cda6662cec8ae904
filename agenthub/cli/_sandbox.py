"""`agenthub sandbox build-image` and `agenthub sandbox run FILE`."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from agenthub._errors import AgentHubError


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sandbox = commands.add_parser("sandbox", help="build the sandbox image and run code in it")
    actions = sandbox.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser(
        "build-image", help="debootstrap a minimal Debian with python3 and docker-import it"
    )
    build.add_argument("--tag", default=None, help="image tag (default: the backend's own)")
    build.add_argument("--suite", default="bookworm", help="Debian suite (default: bookworm)")
    build.add_argument("--mirror", default=None, help="Debian mirror URL (default: debootstrap's)")
    build.add_argument("--if-missing", action="store_true", help="do nothing if the tag exists")
    build.set_defaults(handler="agenthub.cli._sandbox:build_image_command")
    run = actions.add_parser("run", help="run a Python file in the sandbox and show the result")
    run.add_argument("file", metavar="FILE", help="the Python program to run")
    run.add_argument("--stdin", metavar="F", default=None, help="file to feed as standard input")
    run.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "docker", "bwrap", "unisolated"),
        help="auto: docker, else bwrap (never unisolated unless named)",
    )
    run.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    run.add_argument("--memory-mb", type=int, default=512, help="memory limit (default 512)")
    run.set_defaults(handler="agenthub.cli._sandbox:run_command")


def build_image_command(args: argparse.Namespace) -> int:
    from agenthub.sandbox import IMAGE, build_image, image_exists

    tag = args.tag or IMAGE
    if args.if_missing and image_exists(tag):
        print(f"sandbox image {tag} is present")
        return 0
    seconds = build_image(tag, suite=args.suite, mirror=args.mirror)
    print(f"built sandbox image {tag} in {seconds:.0f} s")
    return 0


def run_command(args: argparse.Namespace) -> int:
    import anyio

    from agenthub.sandbox import Limits, open_sandbox

    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise AgentHubError(f"--timeout {args.timeout:g}: give a finite number of seconds above 0")
    if args.memory_mb <= 0:
        raise AgentHubError(f"--memory-mb {args.memory_mb}: give a positive number of MiB")
    raw = _read(args.file, "FILE")
    try:
        code = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AgentHubError(
            f"FILE {args.file} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
            "give a Python source file"
        ) from None
    stdin = _read(args.stdin, "--stdin") if args.stdin else b""
    limits = Limits(timeout_s=args.timeout, memory_mb=args.memory_mb)

    async def run() -> int:
        async with open_sandbox(args.backend, limits=limits, pool_size=1) as sandbox:
            result = await sandbox.run(code, stdin=stdin)
        sys.stdout.write(result.stdout)
        sys.stdout.flush()
        sys.stderr.write(result.stderr)
        extra = " (output truncated)" if result.truncated else ""
        detail = f": {result.detail}" if result.detail else ""
        print(
            f"[sandbox {sandbox.name}] {result.status} exit={result.exit_code} "
            f"in {result.duration_s:.2f} s{extra}{detail}",
            file=sys.stderr,
        )
        return 0 if result.ok else 1

    return anyio.run(run)


def _read(path: str, what: str) -> bytes:
    """A file named on the command line; pipes such as `/dev/stdin` are read like files."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise AgentHubError(f"{what} {path} does not exist; check the path") from None
    except IsADirectoryError:
        raise AgentHubError(f"{what} {path} is a directory; give a file") from None
    except OSError as exc:
        raise AgentHubError(f"{what} {path} cannot be read ({exc.strerror})") from None
