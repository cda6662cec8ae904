"""scripts/uv_install.py: pip's configuration handed to uv. The set-up (scripts/setup.sh, run
by every `make test`) installs through it; the last test runs it with the real uv and pip."""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import subprocess
from types import ModuleType

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "uv_install.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("uv_install", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


uv_install = _script()

LISTED = """:env:.default-timeout='180'
:env:.find-links='/srv/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/pip/constraints.txt'
global.extra-index-url='file:///srv/a/simple file:///srv/b/simple'
global.find-links='/srv/old-wheels'
global.no-index='false'
global.progress-bar='off'
user.trusted-host='example'
"""


def test_pip_s_variables_win_over_its_files_and_unknown_keys_are_left_out() -> None:
    config = uv_install.parse_config(LISTED)
    assert config["find-links"] == "/srv/wheels", "PIP_FIND_LINKS over the file's"
    assert config["timeout"] == "180" and config["cert"].endswith("ca-certificates.crt")
    assert "trusted-host" not in config, "a scope pip does not read for install"


def test_uv_gets_every_index_find_links_constraint_and_the_ca_bundle() -> None:
    command, variables = uv_install.uv_command(uv_install.parse_config(LISTED), ["-e", "."])
    options = command[command.index("install") :]
    assert options[-2:] == ["-e", "."]
    pairs = list(itertools.pairwise(options))
    assert ("--index-strategy", "unsafe-best-match") in pairs, "pip's choice across indexes"
    assert "--compile-bytecode" in options, "as pip does"
    assert ("--extra-index-url", "file:///srv/a/simple") in pairs
    assert ("--extra-index-url", "file:///srv/b/simple") in pairs
    assert ("--find-links", "/srv/wheels") in pairs and "/srv/old-wheels" not in options
    assert ("--constraint", "/etc/pip/constraints.txt") in pairs
    assert "--no-index" not in options and "--progress-bar" not in options
    assert variables == {
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        "UV_HTTP_TIMEOUT": "180",
    }


def test_no_index_is_handed_on() -> None:
    command, _ = uv_install.uv_command(uv_install.parse_config("global.no-index='true'"), ["x"])
    assert "--no-index" in command


@pytest.mark.integration
def test_uv_under_this_machine_s_pip_config_picks_the_versions_the_set_up_installed() -> None:
    """The real uv under the real `pip config list` of this venv resolves agenthub's full set
    and would move no installed package: what it would add are only the packages the set-up
    removes on purpose (torchvision and co.), and agenthub itself, which uv reinstalls as
    editable. uv keeps what is installed, so this shows that the set-up's uv runs under this
    machine's configuration, not that uv's choice equals pip's: that was checked once against
    pip's `--dry-run --report` in a fresh venv (docs/development.md's set-up figures)."""
    from importlib.metadata import PackageNotFoundError, version

    command, variables = uv_install.uv_command(
        uv_install.pip_config(), ["--dry-run", "-e", f"{REPO}[train,cpu,dev,view,hubs]"]
    )
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, **variables}
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "Resolved" in said, said[-3000:]
    added = re.findall(r"^ \+ (\S+)==(\S+)$", said, re.MULTILINE)
    assert added, said[-3000:]  # the removed ones at least
    for name, wanted in added:
        try:
            assert version(name) == wanted, f"uv would pick {name} {wanted}:\n{said[-3000:]}"
        except PackageNotFoundError:
            assert name in ("torchvision", "torchaudio", "torchcodec"), said[-3000:]
