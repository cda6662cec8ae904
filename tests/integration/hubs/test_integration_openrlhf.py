"""`agenthub export openrlhf`'s file under the real OpenRLHF, inside a venv of its own.

OpenRLHF is installed there without its dependencies: they pin a CUDA build of flash-attn
and other versions than agenthub's, and its agent module needs only torch, transformers,
aiohttp, sympy and pylatexenc, which the venv sees from agenthub's own (see conftest.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agenthub.testing._venvs import overlay_venv

from .conftest import run_inside

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

OPENRLHF = "openrlhf==0.11.2"


@pytest.fixture(scope="module")
def openrlhf_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = overlay_venv(tmp_path_factory.mktemp("venv-openrlhf"))
    install = [str(python), "-m", "pip", "install", "-qq", "--no-deps", OPENRLHF]
    result = subprocess.run(install, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(install)}:\n{result.stderr[-4000:]}"
    return python


def test_the_exported_agent_file_runs_under_openrlhf(openrlhf_python: Path) -> None:
    output = run_inside(openrlhf_python, "tests/integration/hubs/inside_openrlhf.py")
    assert "3 passed" in output, output[-2000:]
