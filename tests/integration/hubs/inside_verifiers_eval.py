"""`agenthub eval` of the verifiers adapter on the embedded default model, run inside
verifiers' own venv by test_verifiers.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ...conftest import FIXTURES
from ...vllm_server import URL_VARIABLE
from ..test_eval_default_model import run_eval

pytestmark = [pytest.mark.integration, pytest.mark.smoke, pytest.mark.timeout(1500)]


def test_eval_runs_verifiers_on_the_default_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = os.pathsep.join([str(FIXTURES / "hubs"), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    run_eval("verifiers", ["env_id=vf_guess_color"], tmp_path, os.environ[URL_VARIABLE])


def test_eval_runs_a_v1_taskset_on_the_default_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = os.pathsep.join([str(FIXTURES / "hubs"), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    run_eval("verifiers_v1", ["taskset=vf_v1_capitals"], tmp_path, os.environ[URL_VARIABLE])
