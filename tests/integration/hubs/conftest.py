"""Venvs of their own for the hubs whose pins differ from agenthub's (gem, verifiers, OpenEnv).

Each is made once per test session: a venv that sees this interpreter's packages (a `.pth`
file listing its site-packages), with the hub's extra installed into it, so the hub's pins
shadow ours there and nowhere else. Tests run a module of tests inside it with pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from agenthub.testing._venvs import overlay_venv

from ...conftest import REPO
from ...vllm_server import URL_VARIABLE

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


# Venvs for another release of a hub than the extra pins, by name.
RELEASES = {"verifiers04": ["verifiers==0.4.0"]}


def extra_requirements(extra: str) -> list[str]:
    """The pinned requirements of one of agenthub's extras, as pyproject.toml lists them
    (or of a release named in `RELEASES`)."""
    if extra in RELEASES:
        return RELEASES[extra]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"][extra])


@pytest.fixture(scope="session")
def hub_venv(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`hub_venv(extra)`: the python of a venv with that extra installed, made once."""
    made: dict[str, Path] = {}

    def make(extra: str) -> Path:
        if extra not in made:
            where = tmp_path_factory.mktemp(f"venv-{extra}")
            python = overlay_venv(where)
            install = [str(python), "-m", "pip", "install", "-qq", *extra_requirements(extra)]
            result = subprocess.run(install, capture_output=True, text=True, timeout=900)
            assert result.returncode == 0, f"{' '.join(install)}:\n{result.stderr[-4000:]}"
            made[extra] = python
        return made[extra]

    return make


def run_inside(
    python: Path, module: str | list[str], timeout: float = 900, vllm_server: str | None = None
) -> str:
    """Run the tests of `module` (a path under tests/, or several, in one interpreter) with
    that venv's python; assert they all pass and return pytest's output. `vllm_server`: the
    URL of the session's `vllm serve`, which the tests inside read from the environment
    (tests/vllm_server.py)."""
    # A learner built earlier in this process left RANK, LOCAL_RANK and WORLD_SIZE set (for
    # DeepSpeed): a hub's trainer inside (TRL through accelerate) would read them as a launch.
    launched = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in launched}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    if vllm_server is not None:
        env[URL_VARIABLE] = vllm_server
    modules = [module] if isinstance(module, str) else module
    # The tests inside get this run's budget, not the suite's default of 120 s a test: a hub's
    # trainer or server starts inside them, which a slow machine can take past 120 s.
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-o", f"timeout={int(timeout)}", *modules]
    result = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert " passed" in output and " skipped" not in output, output[-2000:]
    return output
