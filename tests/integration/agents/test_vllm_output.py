"""`VLLMEngine(output=...)`: what the engine core's process prints goes to that file, not the
owner's terminal, and the owner's own output is its own again once the engine is up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OWNER = """
import asyncio, sys
from agenthub.agents import SamplingParams, VLLMEngine

async def main():
    engine = VLLMEngine(sys.argv[1], max_model_len=128, output=sys.argv[2])
    try:
        done = await engine.generate([5, 6, 7], SamplingParams(max_tokens=2, seed=0))
        print("GENERATED", len(done.token_ids), flush=True)
    finally:
        await engine.aclose()

asyncio.run(main())
"""

CORE_LINE = "Initializing a V1 LLM engine"  # logged by vLLM's engine core as it starts


def test_the_engine_core_prints_into_the_output_file(tiny_model: Path, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "engine.log"
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "INFO"}
    done = subprocess.run(
        [sys.executable, "-c", OWNER, str(tiny_model), str(log)],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "GENERATED 2" in done.stdout, "the owner's stdout is its own again"
    assert CORE_LINE in log.read_text()
    assert CORE_LINE not in done.stdout + done.stderr
