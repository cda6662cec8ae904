"""The verifiers adapter, tested inside a venv with verifiers' own pins (see conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import run_inside

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_verifiers_adapter_in_verifiers_venv(hub_venv: Callable[[str], Path]) -> None:
    output = run_inside(hub_venv("verifiers"), "tests/integration/hubs/inside_verifiers.py")
    assert "9 passed" in output, output[-2000:]


@pytest.mark.smoke
def test_eval_runs_verifiers_in_its_venv(hub_venv: Callable[[str], Path], vllm_server: str) -> None:
    output = run_inside(
        hub_venv("verifiers"), "tests/integration/hubs/inside_verifiers_eval.py", 1700, vllm_server
    )
    assert "2 passed" in output, output[-2000:]
