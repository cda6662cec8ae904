"""`agenthub serve` played by OpenEnv's own client, inside the venv with OpenEnv's pins that
test_openenv.py builds (see conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import run_inside

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_openenv_s_client_plays_agenthub_serve(hub_venv: Callable[[str], Path]) -> None:
    output = run_inside(hub_venv("openenv"), "tests/integration/hubs/inside_serve_openenv.py")
    assert "3 passed" in output, output[-2000:]
