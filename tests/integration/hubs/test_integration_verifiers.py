"""`agenthub.integrations.verifiers` under verifiers' own evaluation loop, inside the venv
with verifiers' pins that test_verifiers.py builds (see conftest.py), and under verifiers
0.4's v1 API in a venv of its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import run_inside

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_verifiers_evaluates_agenthub_envs(hub_venv: Callable[[str], Path]) -> None:
    module = "tests/integration/hubs/inside_integration_verifiers.py"
    output = run_inside(hub_venv("verifiers"), module)
    assert "2 passed" in output, output[-2000:]


def test_verifiers_v1_runs_agenthub_envs(hub_venv: Callable[[str], Path]) -> None:
    module = "tests/integration/hubs/inside_integration_verifiers_v1.py"
    output = run_inside(hub_venv("verifiers04"), module)
    assert "3 passed" in output, output[-2000:]
