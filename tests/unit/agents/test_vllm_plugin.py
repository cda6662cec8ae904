"""The vLLM plugin that caps how long vLLM's queue readers spin (agenthub.agents._vllm_plugin).
The real thing, in a real engine: tests/integration/agents/test_vllm_idle_cpu.py."""

from __future__ import annotations

import sys
import types

import pytest

from agenthub.agents import _vllm_plugin


class FakeCondition:
    """The part of vLLM's SpinCondition the plugin relies on."""

    def __init__(self, busy_loop_s: float = 1.0) -> None:
        self.busy_loop_s = busy_loop_s
        self.waits: list[tuple[float, int | None]] = []

    def wait(self, timeout_ms: int | None = None) -> None:
        self.waits.append((self.busy_loop_s, timeout_ms))


@pytest.fixture
def condition_class(monkeypatch: pytest.MonkeyPatch) -> type[FakeCondition]:
    cls = type("SpinCondition", (FakeCondition,), {})
    module = types.ModuleType("vllm.distributed.device_communicators.shm_broadcast")
    module.SpinCondition = cls  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return cls


def test_readers_spin_at_most_the_configured_time(
    condition_class: type[FakeCondition], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_vllm_plugin.SPIN_ENV, "0.005")
    _vllm_plugin.register()
    _vllm_plugin.register()  # vLLM may load plugins again in one process
    reader, short = condition_class(), condition_class(busy_loop_s=0.001)
    reader.wait(250)
    short.wait()
    assert reader.waits == [(0.005, 250)]
    assert short.waits == [(0.001, None)]  # a shorter spin is kept


def test_without_the_variable_vllm_is_left_alone(
    condition_class: type[FakeCondition], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_vllm_plugin.SPIN_ENV, raising=False)
    original = condition_class.wait
    _vllm_plugin.register()
    assert condition_class.wait is original


def test_a_value_that_is_not_seconds_is_ignored_with_a_warning(
    condition_class: type[FakeCondition],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(_vllm_plugin.SPIN_ENV, "fast")
    original = condition_class.wait
    _vllm_plugin.register()
    assert condition_class.wait is original
    assert "AGENTHUB_VLLM_SPIN_S='fast'" in caplog.text
