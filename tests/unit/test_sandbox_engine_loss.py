"""Handles on a shared sandbox while its engine is lost: nobody re-probes or switches backend,
the pool they share carries on once the engine is back."""

from __future__ import annotations

import threading

import pytest

from agenthub.sandbox import (
    DockerSandbox,
    ExecResult,
    ExecStatus,
    FakeSandbox,
    SandboxUnavailableError,
    SharedSandbox,
    _docker,
    _shared,
)
from agenthub.sandbox._fake import run_in_subprocess
from tests.unit.test_sandbox_types import Probes

pytestmark = pytest.mark.anyio

LOST = ExecResult(ExecStatus.ENGINE_LOST, detail="the Docker engine stopped answering")


async def test_an_engine_lost_run_keeps_autos_choice_and_the_shared_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probes = Probes(monkeypatch)
    outcomes = iter([LOST])
    pool = FakeSandbox(lambda request: next(outcomes, None) or run_in_subprocess(request))
    monkeypatch.setattr(_shared, "open_backend", lambda *a, **k: pool)
    first = SharedSandbox("auto")
    assert (await first.run("print(1)")).status is ExecStatus.ENGINE_LOST
    probes.docker = "the Docker engine does not answer"  # still restarting
    second = SharedSandbox("auto")  # the next episode's handle, made during the gap
    assert second.name == "docker" and probes.calls == 1, "no switch to bwrap, no probe"
    assert (await second.run("print(2)")).stdout == "2\n"
    assert len(pool.requests) == 2, "both handles ran on the one pool"
    await first.aclose()
    await second.aclose()
    assert pool.closed == 1


def test_a_named_backend_is_probed_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # Handles are made per episode: a probe each would block the event loop on a hung engine,
    # and fail every episode's env construction while the engine restarts.
    probes = Probes(monkeypatch)
    monkeypatch.setattr(_shared, "_named", {})
    assert SharedSandbox("docker").name == SharedSandbox("docker").name == "docker"
    assert probes.calls == 1
    probes.docker = "the Docker engine does not answer"
    assert SharedSandbox("docker").name == "docker" and probes.calls == 1


def test_a_named_backend_that_does_not_work_is_not_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probes = Probes(monkeypatch)
    monkeypatch.setattr(_shared, "_named", {})
    probes.docker = "the Docker engine does not answer"
    with pytest.raises(SandboxUnavailableError, match="the Docker engine does not answer"):
        SharedSandbox("docker")
    probes.docker = None
    assert SharedSandbox("docker").name == "docker" and probes.calls == 2


async def test_a_hung_engine_costs_a_run_its_connect_bound_then_fails_fast(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A hung dockerd accepts and never answers: nothing may wait on it past its bound, and
    # the runs right behind the first do not each wait again.
    calls: list[float] = []
    release, answered = threading.Event(), threading.Event()

    def hung_connect(timeout_s: float) -> None:
        calls.append(timeout_s)
        release.wait(10)  # hung until the test lets it go
        answered.set()

    monkeypatch.setattr(_docker, "connect", hung_connect)
    monkeypatch.setattr(_docker, "CONNECT_S", 0.3)
    sandbox = DockerSandbox(pool_size=1)
    first = await sandbox.run("print(1)")
    assert first.status is ExecStatus.ENGINE_LOST and not answered.is_set(), "gave up on its own"
    assert "Docker engine did not answer a connection within 0.3 s" in first.detail
    second = await sandbox.run("print(2)")
    assert second.status is ExecStatus.ENGINE_LOST and calls == [_docker.API_TIMEOUT_S]
    release.set()
    await sandbox.aclose()
