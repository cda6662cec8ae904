"""An in-process vLLM engine leaves the cores alone between requests. vLLM's CPU default runs the
model in a worker process whose shared-memory queue with the engine core is read by spinning for
a second after every message, which on a 2-core machine takes the cores the sandboxes and the
learner run on; the engine runs the model in the engine core's process instead (see
`VLLMEngine`), as vLLM does on a GPU."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil
import pytest

from agenthub.agents import SamplingParams, VLLMEngine

pytestmark = pytest.mark.integration


def children_cpu_s() -> float:
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


@pytest.mark.timeout(600)
def test_engine_processes_do_not_spin_between_requests(tiny_model: Path) -> None:
    async def scenario() -> float:
        engine = VLLMEngine(tiny_model, max_model_len=256)
        try:
            await engine.generate([5, 17, 40], SamplingParams(max_tokens=4, seed=0))
            before, start = children_cpu_s(), time.monotonic()
            await asyncio.sleep(1.5)  # a spinning reader would hold a core the first second
            return (children_cpu_s() - before) / (time.monotonic() - start)
        finally:
            await engine.aclose()

    busy = asyncio.run(scenario())
    # Measured: with vLLM's CPU default (a worker process) 68% of a core; without it near 0.
    assert busy < 0.25, f"the engine's processes used {busy:.0%} of a core while idle"
