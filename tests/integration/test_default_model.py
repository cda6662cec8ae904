"""`agenthub model init` builds the real default into the cache that every later command reads,
and the session's `vllm serve` serves (tests/integration/conftest.py): vLLM loading and
sampling from a directory `build_default_model` wrote is checked there, token by token, in
agents/test_openai_engine.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agenthub.agents.default_model import MANIFEST, DefaultModelConfig

pytestmark = pytest.mark.integration
pytest.importorskip("vllm", reason="the vLLM integration tests need the cpu or gpu extra")


@pytest.mark.timeout(900)
def test_model_init_builds_the_real_default_that_vllm_serves() -> None:
    # Builds into the user's cache on purpose: later commands and tests use this model.
    result = subprocess.run(
        [sys.executable, "-m", "agenthub", "model", "init"],
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    path = Path(result.stdout.strip().splitlines()[-1])
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["config"] == DefaultModelConfig().model_dump(mode="json")
    assert manifest["sft_loss"]["last"] < manifest["sft_loss"]["first"]
    # vLLM serving this very build (the cache every command reads) is the session's shared
    # `vllm serve` (tests/integration/conftest.py), which test_openai_engine.py checks token by
    # token.
    from agenthub.agents.default_model import ensure_default_model

    assert ensure_default_model() == path
