"""An in-process vLLM engine's processes sleep while they wait on each other: vLLM's own readers
spin for a second after every step, which on a 2-core machine takes the cores the sandboxes and
the learner run on (see agenthub.agents._vllm_plugin). Without a GPU the engine caps the spin by
itself; with one it keeps vLLM's loop unless asked, as this test does there."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import psutil
import pytest

from agenthub.agents import SamplingParams, VLLMEngine
from agenthub.agents._vllm import CPU_SPIN_S
from agenthub.agents._vllm_plugin import SPIN_ENV

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
def test_engine_processes_do_not_spin_between_requests(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    gpu = torch.cuda.is_available()
    monkeypatch.delenv(SPIN_ENV, raising=False)
    if gpu:  # the cap is opt-in there
        monkeypatch.setenv(SPIN_ENV, str(CPU_SPIN_S))

    async def scenario() -> float:
        engine = VLLMEngine(tiny_model, max_model_len=256)
        try:
            assert os.environ.get(SPIN_ENV) == str(CPU_SPIN_S)  # set by the engine without GPU
            await engine.generate([5, 17, 40], SamplingParams(max_tokens=4, seed=0))
            before, start = children_cpu_s(), time.monotonic()
            await asyncio.sleep(1.5)  # vLLM alone would spin through the first second of this
            return (children_cpu_s() - before) / (time.monotonic() - start)
        finally:
            await engine.aclose()

    busy = asyncio.run(scenario())
    # Spinning keeps at least one process on a core the whole second: a share near 1 or more.
    assert busy < 0.25, f"the engine's processes used {busy:.0%} of a core while idle"
