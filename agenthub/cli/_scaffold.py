from __future__ import annotations

import argparse
import importlib.util
import keyword
import re
import string
import sys
from importlib.resources import files
from pathlib import Path

from rich.console import Console

from agenthub._errors import AgentHubError
from agenthub._registry import list_envs

_NAME = re.compile(r"^[a-z][a-z0-9]*([_-][a-z0-9]+)*$")

# template file -> path in the new package ($module is replaced)
_LAYOUT = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "init.py.tmpl": "src/$module/__init__.py",
    "env.py.tmpl": "src/$module/env.py",
    # Named after the module: pytest imports test files by name, and two packages' tests run
    # together (a repository of several envs) would otherwise clash.
    "test_env.py.tmpl": "tests/test_$module.py",
}
# `--tools`: a ToolEnv in place of the guessing game
_TOOLS = {"env.py.tmpl": "env_tools.py.tmpl", "test_env.py.tmpl": "test_env_tools.py.tmpl"}
_SUMMARY = {
    False: "guess a secret number in a few turns, told higher or lower",
    True: "work out a sum with big numbers by calling tools (Python functions)",
}


def scaffold(name: str, target: Path, *, tools: bool = False) -> list[Path]:
    """Write a plugin package for env `name` into `target`; return the files written. With
    `tools`, the example env is a `ToolEnv` whose model calls Python functions."""
    if not _NAME.match(name):
        raise AgentHubError(
            f"{name!r} is not a valid environment name; use lowercase letters, digits, "
            "'-' or '_', starting with a letter (e.g. guess-number)"
        )
    module = name.replace("-", "_")
    _check_free(name, module)
    if target.exists() and any(target.iterdir()):
        raise AgentHubError(f"{target} already exists and is not empty; choose another --dir")
    values = {
        "name": name,
        "module": module,
        "class_name": _class_name(module),
        "summary": _SUMMARY[tools],
    }
    templates = files("agenthub.cli") / "templates" / "plugin"
    written = []
    for template, relative in _LAYOUT.items():
        path = target / string.Template(relative).substitute(values)
        path.parent.mkdir(parents=True, exist_ok=True)
        source = _TOOLS.get(template, template) if tools else template
        text = string.Template((templates / source).read_text(encoding="utf-8"))
        path.write_text(text.substitute(values), encoding="utf-8")
        written.append(path)
    return written


def _check_free(name: str, module: str) -> None:
    """Refuse a name the new package would clash on once installed: an env id two packages
    declare cannot be made, a keyword cannot be imported at all, and a top-level module named
    like one Python already finds hides it or is hidden by it (`random` fails as "'random' is
    not a package")."""
    other = f"choose another name, e.g. 'my-{name}'"
    taken = {s.id: s for s in list_envs()}
    if name in taken:
        owner = f"package {taken[name].package!r}" if taken[name].package else "this process"
        raise AgentHubError(
            f"environment id {name!r} is already declared by {owner}; with a second package "
            f"declaring it, agenthub.make({name!r}) refuses both; {other}"
        )
    if keyword.iskeyword(module):
        # A soft keyword (`match`, `type`) is still a valid module name, so only hard ones.
        raise AgentHubError(
            f"the package would be the module {module!r}, which is a Python keyword: "
            f"`from {module}.env import ...` is a syntax error; {other}"
        )
    if module in sys.stdlib_module_names:
        raise AgentHubError(
            f"the package would be the module {module!r}, which is in Python's standard "
            f"library: one of the two would hide the other on import; {other}"
        )
    found = importlib.util.find_spec(module)
    if found is not None and found.origin is not None:  # a namespace package has no origin
        raise AgentHubError(
            f"the package would be the module {module!r}, but Python already imports a "
            f"module of that name ({found.origin}): one of the two would hide the other; "
            f"{other}"
        )


def _class_name(module: str) -> str:
    return "".join(part.capitalize() for part in module.split("_")) + "Env"


def init_command(args: argparse.Namespace) -> int:
    target = Path(args.dir) if args.dir else Path(args.name)
    written = scaffold(args.name, target, tools=args.tools)
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
