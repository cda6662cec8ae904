from __future__ import annotations

import argparse
import re
import string
from importlib.resources import files
from pathlib import Path

from rich.console import Console

from agenthub._errors import AgentHubError

_NAME = re.compile(r"^[a-z][a-z0-9]*([_-][a-z0-9]+)*$")

# template file -> path in the new package ($module is replaced)
_LAYOUT = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "init.py.tmpl": "src/$module/__init__.py",
    "env.py.tmpl": "src/$module/env.py",
    "test_env.py.tmpl": "tests/test_env.py",
}


def scaffold(name: str, target: Path) -> list[Path]:
    """Write a plugin package for env `name` into `target`; return the files written."""
    if not _NAME.match(name):
        raise AgentHubError(
            f"{name!r} is not a valid environment name; use lowercase letters, digits, "
            "'-' or '_', starting with a letter (e.g. guess-number)"
        )
    if target.exists() and any(target.iterdir()):
        raise AgentHubError(f"{target} already exists and is not empty; choose another --dir")
    module = name.replace("-", "_")
    values = {"name": name, "module": module, "class_name": _class_name(module)}
    templates = files("agenthub.cli") / "templates" / "plugin"
    written = []
    for template, relative in _LAYOUT.items():
        path = target / string.Template(relative).substitute(values)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = string.Template((templates / template).read_text(encoding="utf-8"))
        path.write_text(text.substitute(values), encoding="utf-8")
        written.append(path)
    return written


def _class_name(module: str) -> str:
    return "".join(part.capitalize() for part in module.split("_")) + "Env"


def init_command(args: argparse.Namespace) -> int:
    target = Path(args.dir) if args.dir else Path(args.name)
    written = scaffold(args.name, target)
    console = Console()
    console.print(f"Created plugin package [bold]{args.name}[/bold] in {target}/:")
    for path in written:
        console.print(f"  {path.relative_to(target)}")
    console.print(
        "\nNext:\n"
        f"  pip install -e {target}            # registers env id '{args.name}'\n"
        "  agenthub envs list                  # it is listed\n"
        f"  pytest {target}/tests               # check_env passes"
    )
    return 0
