"""`agenthub.integrations.trl` under TRL's own `GRPOTrainer`, inside a venv with the `trl`
extra (see conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import run_inside

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_trl_trains_on_an_agenthub_env(hub_venv: Callable[[str], Path]) -> None:
    output = run_inside(hub_venv("trl"), "tests/integration/hubs/inside_integration_trl.py")
    assert "1 passed" in output, output[-2000:]


def test_trl_trains_on_a_multi_turn_agenthub_env(hub_venv: Callable[[str], Path]) -> None:
    module = "tests/integration/hubs/inside_integration_trl_rollout.py"
    output = run_inside(hub_venv("trl"), module)
    assert "1 passed" in output, output[-2000:]
