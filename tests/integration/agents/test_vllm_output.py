"""An in-process `VLLMEngine` as its owner process sees it, in one engine start:

- `output=...`: what the engine core's process prints goes to that file, not the owner's
  terminal, and the owner's own output is its own again once the engine is up;
- it leaves the cores alone between requests. vLLM's CPU default runs the model in a worker
  process whose shared-memory queue with the engine core is read by spinning for a second
  after every message, which on a 2-core machine takes the cores the sandboxes and the learner
  run on; the engine runs the model in the engine core's process instead (see `VLLMEngine`),
  as vLLM does on a GPU. Measured: with vLLM's CPU default 68% of a core; without it near 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OWNER = """
import asyncio, sys, time
import psutil
from agenthub.agents import SamplingParams, VLLMEngine

def children_cpu_s():
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total

async def main():
    engine = VLLMEngine(sys.argv[1], max_model_len=128, output=sys.argv[2])
    try:
        done = await engine.generate([5, 6, 7], SamplingParams(max_tokens=2, seed=0))
        print("GENERATED", len(done.token_ids), flush=True)
        before, start = children_cpu_s(), time.monotonic()
        await asyncio.sleep(1.5)  # a spinning reader would hold a core the first second
        print("IDLE_CORES", (children_cpu_s() - before) / (time.monotonic() - start), flush=True)
    finally:
        await engine.aclose()

asyncio.run(main())
"""

CORE_LINE = "Initializing a V1 LLM engine"  # logged by vLLM's engine core as it starts


def test_the_engine_core_prints_into_its_file_and_idles_without_spinning(
    tiny_model: Path, tmp_path: Path
) -> None:
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
    [idle] = [float(line.split()[1]) for line in done.stdout.splitlines() if "IDLE_CORES" in line]
    assert idle < 0.25, f"the engine's processes used {idle:.0%} of a core while idle"
