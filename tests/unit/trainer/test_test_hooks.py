"""The test hook that holds a rollout worker inside a weight sync: off unless named, and it
says where it holds before it does."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agenthub.trainer._test_hooks import HOLD_IN_SYNC, hold_in_sync


def test_the_sync_hold_returns_at_once_unless_it_names_the_worker_version_and_first_life(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = tmp_path / "held"
    monkeypatch.delenv(HOLD_IN_SYNC, raising=False)
    asyncio.run(hold_in_sync(1, 0, 2))
    monkeypatch.setenv(HOLD_IN_SYNC, f"1:2:{held}")
    for rank, life, version in [(0, 0, 2), (1, 0, 1), (1, 1, 2)]:  # a replacement: life 1
        asyncio.run(hold_in_sync(rank, life, version))
    assert not held.exists()


def test_the_sync_hold_writes_its_process_id_then_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = tmp_path / "held"
    monkeypatch.setenv(HOLD_IN_SYNC, f"1:2:{held}")

    async def holding() -> None:
        hold = asyncio.create_task(hold_in_sync(1, 0, 2))
        while not held.exists():
            ended, _ = await asyncio.wait({hold}, timeout=0.01)
            assert not ended, "it holds until it has said so, and after"
        assert not hold.done()
        hold.cancel()

    asyncio.run(asyncio.wait_for(holding(), timeout=30))
    assert held.read_text() == str(os.getpid())
    assert not (tmp_path / "held.part").exists()
