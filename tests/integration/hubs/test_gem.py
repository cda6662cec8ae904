"""The gem adapter, tested inside a venv with gem's own pins (see conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import run_inside

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_gem_adapter_in_gem_s_venv(hub_venv: Callable[[str], Path]) -> None:
    output = run_inside(hub_venv("gem"), "tests/integration/hubs/inside_gem.py")
    assert "5 passed" in output, output[-2000:]


@pytest.mark.smoke
def test_eval_runs_gem_in_gem_s_venv(hub_venv: Callable[[str], Path], vllm_server: str) -> None:
    output = run_inside(
        hub_venv("gem"), "tests/integration/hubs/inside_gem_eval.py", 1700, vllm_server
    )
    assert "1 passed" in output, output[-2000:]
