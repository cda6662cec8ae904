"""`agenthub.integrations.trl` under TRL's own `GRPOTrainer`, inside a venv with the `trl`
extra (see conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import run_inside

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_trl_trains_on_single_and_multi_turn_agenthub_envs(
    hub_venv: Callable[[str], Path],
) -> None:
    # One interpreter for both, as torch, TRL and the model load once: GRPOTrainer on an
    # agenthub env's reward (inside_integration_trl.py) and on its multi-turn episodes through
    # `EnvRollout` (inside_integration_trl_rollout.py).
    modules = [
        "tests/integration/hubs/inside_integration_trl.py",
        "tests/integration/hubs/inside_integration_trl_rollout.py",
    ]
    output = run_inside(hub_venv("trl"), modules)
    assert "2 passed" in output, output[-2000:]
