"""`agenthub bench`: list and run the performance scripts under `benchmarks/`.

Each figure agenthub claims lives in one script under `benchmarks/` of the source tree, which
runs its baseline in the same process run and prints its ratio as the last line. This command
finds those scripts, lists them with the first line of their docstrings, and runs one with the
same interpreter, passing its arguments through.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

from agenthub._errors import AgentHubError

__all__ = ["add_arguments", "bench_command", "find_benchmarks"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", nargs="?", metavar="NAME", help="the benchmark to run (omit to list them)"
    )
    parser.add_argument(
        "args",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="passed to the benchmark script (see `agenthub bench NAME --help`)",
    )
    parser.add_argument(
        "--dir",
        metavar="DIR",
        help="the benchmarks folder (default: ./benchmarks, else the one beside the package)",
    )


def _benchmarks_dir(given: str | None) -> Path:
    if given is not None:
        folder = Path(given)
        if not folder.is_dir():
            raise AgentHubError(f"--dir {given}: no such folder")
        return folder
    import agenthub

    candidates = [Path.cwd() / "benchmarks", Path(agenthub.__file__).parent.parent / "benchmarks"]
    for folder in candidates:
        if folder.is_dir() and any(folder.glob("*.py")):
            return folder
    raise AgentHubError(
        "no benchmarks/ folder found: the benchmark scripts ship with agenthub's source tree, "
        "not with an installed wheel; run from a clone of agenthub, or pass --dir DIR"
    )


def find_benchmarks(folder: Path) -> dict[str, str]:
    """Script name (without `.py`) -> the first line of its docstring, for every benchmark."""
    found: dict[str, str] = {}
    for script in sorted(folder.glob("*.py")):
        if script.name.startswith("_"):
            continue
        doc = ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""
        found[script.stem] = doc.strip().splitlines()[0] if doc.strip() else ""
    return found


def bench_command(args: argparse.Namespace) -> int:
    folder = _benchmarks_dir(args.dir)
    scripts = find_benchmarks(folder)
    if args.name is None:
        width = max(map(len, scripts), default=0)
        for name, summary in scripts.items():
            print(f"{name:<{width}}  {summary}")
        print(f"\nagenthub bench NAME [ARGS...] runs {folder}/NAME.py; its last line is its ratio.")
        return 0
    name = args.name.removesuffix(".py")
    if name not in scripts:
        raise AgentHubError(
            f"no benchmark named {args.name!r} in {folder}; choose one of {', '.join(scripts)}"
        )
    # The scripts import agenthub from this interpreter; the child gets the terminal, so
    # progress and Ctrl-C behave as if the script had been run directly.
    command = [sys.executable, str(folder / f"{name}.py"), *args.args]
    try:
        return subprocess.run(command, check=False).returncode
    except KeyboardInterrupt:
        return 130
