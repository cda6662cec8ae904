"""`uv pip install ARGS` into the venv of the python running this, configured as pip is.

uv resolves and installs the set-up's ~220 packages in seconds where pip takes minutes, and
picks the same versions, but it reads none of pip's configuration (pip.conf files and PIP_*
variables: extra indexes, find-links, constraints, a CA bundle). This hands uv what
`pip config list` reports, then runs it; its exit status is uv's. Keys uv has no use for are
left out. scripts/setup.sh falls back to pip when this fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys

LISTS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
"""pip's keys whose values (one or several, space-separated) become uv options."""

ENVIRONMENT = {"cert": "SSL_CERT_FILE", "timeout": "UV_HTTP_TIMEOUT"}
"""pip's keys whose value becomes a variable uv reads."""

# pip's precedence, lowest first: config files (their global section, then install's), then
# PIP_* variables, which `pip config list` shows as ":env:".
SCOPES = ("global", "install", ":env:")


def pip_config() -> dict[str, str]:
    """pip's configuration for this python, each key at its winning scope."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    return parse_config(listed)


def parse_config(listed: str) -> dict[str, str]:
    """What `pip config list` printed (`scope.key='value'` lines), each key at its winning
    scope."""
    found: dict[str, tuple[int, str]] = {}
    for line in listed.splitlines():
        match = re.fullmatch(r"(.*)\.([a-z-]+)='(.*)'", line.strip())
        if match is None or match[1] not in SCOPES:
            continue
        scope, key, value = SCOPES.index(match[1]), match[2], match[3]
        key = "timeout" if key == "default-timeout" else key
        if key not in found or found[key][0] <= scope:
            found[key] = (scope, value)
    return {key: value for key, (_, value) in found.items()}


def uv_command(config: dict[str, str], args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The uv command line for `args` under pip's `config`, and the variables it adds."""
    command = [sys.executable, "-m", "uv", "pip", "install", "--python", sys.executable]
    # pip takes the best version across every index; uv's default stops at the first that has
    # the package, which would change what a set-up with extra indexes installs.
    command += ["--index-strategy", "unsafe-best-match"]
    # As pip does: without, the first import compiles each module, slower and printing the
    # SyntaxWarnings of some packages' sources into whatever imported them.
    command.append("--compile-bytecode")
    for key, option in LISTS.items():
        for value in config.get(key, "").split():
            command += [option, value]
    if config.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        command.append("--no-index")
    variables = {ENVIRONMENT[k]: v for k, v in config.items() if k in ENVIRONMENT}
    return [*command, *args], variables


def main(args: list[str]) -> int:
    command, variables = uv_command(pip_config(), ["-q", *args])
    return subprocess.run(command, env={**os.environ, **variables}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
