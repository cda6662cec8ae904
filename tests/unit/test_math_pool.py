"""The verifier pool survives hanging inputs and leaves no process behind."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import anyio
import pytest

from agenthub._worker_process import close_pipes
from agenthub.envs.math import VerifierPool, VerifierPoolError, _pool

from ..conftest import REPO


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a killed child of a still-running parent lingers as a zombie until reaped
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids: list[int], within_s: float = 20.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


@pytest.mark.timeout(300)
def test_pool_survives_1000_verifications_with_hangs_mixed_in() -> None:
    with VerifierPool(2) as pool:
        pool.verify("warm up", "0", timeout_s=60)
        futures = []
        for i in range(1000):
            if i % 125 == 7:
                futures.append((pool.submit(r"\boxed{9^{9^{9}}}", "1", timeout_s=0.5), False))
            else:
                answer = f"so {i} + 1 = \\boxed{{{i + 1}}}"
                # A worker restarted after a hang starts in its first job's time: 60 s, far
                # beyond a busy machine's start, so that only the hangs time out.
                futures.append((pool.submit(answer, str(i + 1), timeout_s=60), True))
        results = [(f.result(timeout=240), expected) for f, expected in futures]
        assert all(got is expected for got, expected in results)
        assert pool.timeouts == 8 and pool.restarts == 8
        assert len(pool.worker_pids()) == 2
        pids = pool.worker_pids()
    assert _wait_gone(pids) == [], "close() must leave no worker running"


@pytest.mark.timeout(120)
def test_killed_workers_are_replaced_and_reaped() -> None:
    with VerifierPool(2) as pool:
        pool.verify("1", "1", timeout_s=60)
        before = pool.worker_pids()
        assert pool.verify(r"\boxed{10^{10^{10}}}", "1", timeout_s=0.5) is False
        assert pool.verify(r"\boxed{2}", "2", timeout_s=60) is True
        after = pool.worker_pids()
        assert len(after) == 2 and set(before) != set(after)
        gone = sorted(set(before) - set(after))
        assert _wait_gone(gone) == []


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_async_verifications_run_concurrently_and_cancel_cleanly() -> None:
    with VerifierPool(2) as pool:
        results: dict[int, bool] = {}

        async def one(i: int) -> None:
            results[i] = await pool.averify(f"\\boxed{{{i}}}", str(i % 3), timeout_s=60)

        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(one, i)
        assert results == {i: i < 3 and i == i % 3 for i in range(20)}
        with anyio.move_on_after(0.2):
            await pool.averify(r"\boxed{9^{9^{9}}}", "1", timeout_s=1.0)
        assert await pool.averify(r"\boxed{1}", "1", timeout_s=60) is True


def test_closed_pool_says_so() -> None:
    pool = VerifierPool(1)
    pool.close()
    pool.close()
    with pytest.raises(VerifierPoolError, match="closed"):
        pool.verify("1", "1")


def test_closing_the_pool_under_a_slow_verification_fails_it_without_a_thread_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # At Ctrl-C the pool's close killed the busy worker, closing its pipe under the read of
    # the thread driving it: "Exception in thread math-verify-0 ... OSError: Bad file
    # descriptor" joined the KeyboardInterrupt's traceback.
    errors: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", errors.append)

    def pipes_closed_first(proc: subprocess.Popen[bytes]) -> None:
        # The order a loaded machine gives when the driver wakes late: the pipe is closed
        # by the time it reads.
        close_pipes(proc)
        proc.kill()
        proc.wait()

    monkeypatch.setattr(_pool, "kill_worker", pipes_closed_first)
    pool = VerifierPool(1)
    assert pool.verify("1", "1", timeout_s=60) is True
    slow = pool.submit(r"\boxed{9^{9^{9}}}", "1", timeout_s=60)
    while not slow.running():
        time.sleep(0.01)
    time.sleep(0.2)  # its driver is now reading the worker's pipe
    pool.close(grace_s=0.1)
    with pytest.raises(VerifierPoolError, match="closed"):
        slow.result(timeout=30)
    assert not errors, [str(e.exc_value) for e in errors]


CHILD = textwrap.dedent(
    """
    import sys, time
    from agenthub.envs.math import default_pool, verify
    verify("1", "1", timeout_s=60)
    print(" ".join(map(str, default_pool().worker_pids())), flush=True)
    while True:
        verify(r"\\boxed{9^{9^{9}}}", "1", timeout_s=30)
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_no_orphan_workers_after_ctrl_c_or_kill_of_the_parent(sig: signal.Signals) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO
    )
    assert child.stdout is not None
    pids = [int(p) for p in child.stdout.readline().split()]
    assert len(pids) >= 2, child.stderr.read() if child.stderr else ""
    time.sleep(0.3)  # the loop is now inside a hanging verification
    child.send_signal(sig)
    child.wait(30)
    assert _wait_gone(pids) == [], f"workers left running after {sig.name}"
    if sig == signal.SIGINT:
        assert child.stderr is not None
        err = child.stderr.read().decode()
        assert "KeyboardInterrupt" in err and err.count("Traceback") == 1, err


@pytest.mark.timeout(120)
def test_a_timeout_is_logged_once_and_briefly(caplog: pytest.LogCaptureFixture) -> None:
    long_hang = "Let me think. " * 40 + r"\boxed{9^{9^{9}}}"
    caplog.set_level(logging.DEBUG, logger="agenthub.envs.math")
    with VerifierPool(1) as pool:
        pool.verify("warm up", "1", timeout_s=60)
        assert pool.verify(long_hang, "1", timeout_s=1.0) is False
        assert pool.verify(long_hang, "1", timeout_s=1.0) is False
    records = [r for r in caplog.records if r.name == "agenthub.envs.math"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.DEBUG]
    warning = records[0].getMessage()
    assert "counted as wrong" in warning and "further ones are logged at debug" in warning
    assert len(warning) < 300 and long_hang not in warning
