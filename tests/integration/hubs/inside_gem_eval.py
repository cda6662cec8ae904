"""`agenthub eval` of the gem adapter on the embedded default model, run inside gem's own
venv by test_gem.py: episodes run and are recorded token-exact (`run_eval` checks)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ...vllm_server import URL_VARIABLE
from ..test_eval_default_model import run_eval

pytestmark = [pytest.mark.integration, pytest.mark.smoke, pytest.mark.timeout(1500)]


def test_eval_runs_gem_on_the_default_model(tmp_path: Path) -> None:
    summary = run_eval(
        "gem",
        ["env_id=game:GuessTheNumber-v0-easy", "num_tasks=3"],
        tmp_path,
        os.environ[URL_VARIABLE],
    )
    for line in summary["lines"]:
        t = json.loads(line)
        assert t["env"] == "gem" and t["score"] in (0.0, 1.0, None), t
