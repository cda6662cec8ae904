"""What a newcomer does: a fresh venv, `pip install -e .` without extras, a plugin made by
`agenthub env init` installed into the same venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from ..conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd, env=env
    )
    assert result.returncode == 0, (
        f"{args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fresh") / "venv"
    venv.EnvBuilder(with_pip=True).create(root)
    run(root / "bin" / "python", "-m", "pip", "install", "-q", "-e", REPO, "pytest")
    return root


def test_light_install_lists_envs_without_torch(fresh_venv: Path) -> None:
    listing = run(fresh_venv / "bin" / "agenthub", "envs", "list", "--json")
    assert "reward_func" in [json.loads(line)["id"] for line in listing.stdout.splitlines()]
    probe = subprocess.run(
        [
            fresh_venv / "bin" / "python",
            "-c",
            "import importlib.util as u; print([m for m in "
            "('torch', 'vllm', 'ray', 'deepspeed') if u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == "[]", "the light install must not pull in the training stack"


@pytest.mark.parametrize(
    ("name", "options", "class_name"),
    [("guess-number", [], "GuessNumberEnv"), ("big-sums", ["--tools"], "BigSumsEnv")],
)
def test_scaffolded_plugin_installs_lists_checks_and_makes(
    fresh_venv: Path, tmp_path: Path, name: str, options: list[str], class_name: str
) -> None:
    bin_dir = fresh_venv / "bin"
    run(bin_dir / "agenthub", "env", "init", name, *options, "--dir", tmp_path / name)
    run(bin_dir / "python", "-m", "pip", "install", "-q", "-e", tmp_path / name)

    listing = run(bin_dir / "agenthub", "envs", "list", "--json")
    rows = {json.loads(line)["id"]: json.loads(line) for line in listing.stdout.splitlines()}
    assert rows[name]["package"] == name
    assert rows[name]["error"] is None

    tests = run(
        bin_dir / "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        tmp_path / name / "tests",
        cwd=tmp_path,
    )
    assert "3 passed" in tests.stdout
    made = run(
        bin_dir / "python",
        "-c",
        f"import agenthub; e = agenthub.make('{name}'); print(type(e).__name__, e.spec.package)",
    )
    assert made.stdout.split() == [class_name, name]
    run(bin_dir / "agenthub", "envs", "check", name)


def test_broken_plugin_is_named_in_the_listing(fresh_venv: Path, tmp_path: Path) -> None:
    bin_dir = fresh_venv / "bin"
    run(bin_dir / "agenthub", "env", "init", "broken-env", "--dir", tmp_path / "broken")
    env_file = tmp_path / "broken" / "src" / "broken_env" / "env.py"
    env_file.write_text(
        env_file.read_text().replace("import re\n", "import re\nimport not_a_real_dependency\n")
    )
    run(bin_dir / "python", "-m", "pip", "install", "-q", "-e", tmp_path / "broken")
    try:
        result = subprocess.run(
            [bin_dir / "agenthub", "envs", "list", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1
        rows = {json.loads(line)["id"]: json.loads(line) for line in result.stdout.splitlines()}
        error = rows["broken-env"]["error"]
        assert (
            "package 'broken-env'" in error and "broken-env = broken_env.env:BrokenEnvEnv" in error
        )
        assert "ModuleNotFoundError" in error
    finally:
        run(bin_dir / "python", "-m", "pip", "uninstall", "-q", "-y", "broken-env")
    assert sys.executable != str(bin_dir / "python")
