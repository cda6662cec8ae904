"""`agenthub eval` of the openenv adapter on the embedded default model, run inside
OpenEnv's own venv by test_openenv.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ...conftest import FIXTURES
from ...vllm_server import URL_VARIABLE
from ..test_eval_default_model import run_eval

pytestmark = [pytest.mark.integration, pytest.mark.smoke, pytest.mark.timeout(1500)]


def test_eval_runs_openenv_on_the_default_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = os.pathsep.join([str(FIXTURES / "hubs"), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    env = ["env=oe_guess_word:GuessWordEnvironment", "observation_field=feedback"]
    run_eval("openenv", [*env, "num_tasks=3"], tmp_path, os.environ[URL_VARIABLE])
