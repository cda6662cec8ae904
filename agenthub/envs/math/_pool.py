"""`VerifierPool`: math verification in worker processes that are hard-killed on timeout.

SymPy can sit inside one huge integer operation (`9^{9^{9}}`) holding the GIL, where neither a
signal handler nor a thread can interrupt it. So each verification runs in a worker process;
when it overruns its timeout the worker is killed (SIGKILL) and replaced, and the verification
counts as wrong. One driver thread per worker feeds it jobs from a shared queue, so a sync
caller, many threads and many asyncio episodes can all use the same pool.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import logging
import os
import queue
import select
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from agenthub._errors import AgentHubError
from agenthub._worker_process import close_pipes, kill_worker, start_worker

__all__ = ["VerifierPool", "VerifierPoolError", "default_pool"]

logger = logging.getLogger("agenthub.envs.math")


class VerifierPoolError(AgentHubError):
    """The verification worker processes could not be started or the pool is closed."""


class _WorkerLost(Exception):
    def __init__(self, why: str) -> None:
        self.why = why


@dataclass
class _Job:
    response: str
    gold: str
    timeout_s: float
    future: concurrent.futures.Future[bool]


class _Worker:
    """One worker process and the buffered reading of its replies."""

    def __init__(self, startup_timeout_s: float) -> None:
        self.proc = start_worker("agenthub.envs.math._worker")
        self._startup_deadline = time.monotonic() + startup_timeout_s
        self._ready = False
        self._buffer = b""

    def run(self, job: _Job) -> bool:
        if not self._ready:
            try:
                self._read_line(self._startup_deadline)
            except _WorkerLost as lost:
                raise VerifierPoolError(
                    f"a math verification worker did not start ({lost.why}, exit code "
                    f"{self.proc.poll()}); its error output is above. Check that math-verify "
                    "imports in this Python."
                ) from None
            self._ready = True
        stdin: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        payload = json.dumps({"response": job.response, "gold": job.gold}).encode() + b"\n"
        try:
            stdin.write(payload)
            stdin.flush()
        except (BrokenPipeError, OSError):
            raise _WorkerLost("it exited") from None
        reply = self._read_line(time.monotonic() + job.timeout_s)
        return bool(reply.get("ok"))

    def _read_line(self, deadline: float) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _WorkerLost("it timed out")
            chunk = self._read(remaining)
            if chunk is None:
                continue
            if not chunk:
                raise _WorkerLost("it exited")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def _read(self, timeout_s: float) -> bytes | None:
        """What the worker wrote within `timeout_s` (None: nothing yet; b"": it is gone). The
        pool's close kills a worker busy with a slow input from another thread, closing its
        pipe under this read: that is the worker gone too, not an error of the pool's."""
        stdout: IO[bytes] = self.proc.stdout  # type: ignore[assignment]
        try:
            fd = stdout.fileno()
            if not select.select([fd], [], [], timeout_s)[0]:
                return None
            return os.read(fd, 1 << 16)
        except (OSError, ValueError):  # closed: EBADF, or "I/O operation on closed file"
            return b""

    def kill(self) -> None:
        kill_worker(self.proc)

    def stop(self, grace_s: float = 1.0) -> None:
        """Close its input so it exits by itself; kill it if it does not within `grace_s`."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(grace_s)
        except (subprocess.TimeoutExpired, OSError):
            self.proc.kill()
            self.proc.wait()
        close_pipes(self.proc)


class VerifierPool:
    """Worker processes for `agenthub.envs.math.verify`, started on first use.

    `num_workers` defaults to the number of CPUs (at least 2, so one hanging input never stalls
    everything). Close the pool with `close()` or a `with` block; the pool used by `verify` is
    closed at interpreter exit, Ctrl-C included, and workers also die with their parent process.
    """

    def __init__(self, num_workers: int | None = None, *, startup_timeout_s: float = 120.0):
        self.num_workers = num_workers or max(2, min(8, os.cpu_count() or 2))
        self.startup_timeout_s = startup_timeout_s
        self.timeouts = 0
        """Verifications that ran past their timeout (each killed its worker)."""
        self.restarts = 0
        """Workers replaced after a timeout or a crash."""
        self._pid = os.getpid()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._drivers: list[threading.Thread] = []
        self._workers: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False

    def submit(
        self, response: str, gold: str, *, timeout_s: float = 5.0
    ) -> concurrent.futures.Future[bool]:
        """Queue one verification; the future's result is the verdict (False on timeout)."""
        future: concurrent.futures.Future[bool] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise VerifierPoolError("the math verifier pool is closed; make a new one")
            if not self._drivers:
                for n in range(self.num_workers):
                    driver = threading.Thread(
                        target=self._drive, name=f"math-verify-{n}", daemon=True
                    )
                    driver.start()
                    self._drivers.append(driver)
        self._jobs.put(_Job(str(response), str(gold), timeout_s, future))
        return future

    def verify(self, response: str, gold: str, *, timeout_s: float = 5.0) -> bool:
        """Verify and wait for the verdict."""
        return self.submit(response, gold, timeout_s=timeout_s).result()

    async def averify(self, response: str, gold: str, *, timeout_s: float = 5.0) -> bool:
        """Verify without blocking the event loop; cancelling drops a job not yet started."""
        return await asyncio.wrap_future(self.submit(response, gold, timeout_s=timeout_s))

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for monitoring and tests)."""
        with self._lock:
            return sorted(w.proc.pid for w in self._workers)

    def _spawn(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise VerifierPoolError("the math verifier pool is closed")
            worker = _Worker(self.startup_timeout_s)
            self._workers.add(worker)
            return worker

    def _retire(self, worker: _Worker, *, kill: bool) -> None:
        if kill:
            worker.kill()
        else:
            worker.stop()
        with self._lock:
            self._workers.discard(worker)

    def _drive(self) -> None:
        worker: _Worker | None = None
        try:
            worker = self._spawn()  # all workers import math-verify at once, before any job
            while (job := self._jobs.get()) is not None:
                if not job.future.set_running_or_notify_cancel():
                    continue
                try:
                    worker = worker or self._spawn()
                    job.future.set_result(worker.run(job))
                except _WorkerLost as lost:
                    assert worker is not None
                    self._retire(worker, kill=True)
                    worker = None
                    if self._closed:
                        job.future.set_exception(VerifierPoolError("the pool was closed"))
                        return
                    self._lost(job, lost.why)
                    job.future.set_result(False)
                    worker = self._spawn()  # starts importing now, ready for the next job
                except VerifierPoolError as exc:
                    if worker is not None:
                        self._retire(worker, kill=True)
                        worker = None
                    job.future.set_exception(exc)
        except VerifierPoolError:
            pass  # closed while replacing a worker
        finally:
            if worker is not None:
                self._retire(worker, kill=False)

    def _lost(self, job: _Job, why: str) -> None:
        with self._lock:
            self.restarts += 1
            if why == "it timed out":
                self.timeouts += 1
            first = self.restarts == 1
        flat = " ".join(job.response.split())
        excerpt = flat if len(flat) <= 60 else flat[:25] + " … " + flat[-25:]
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "math verification counted as wrong: the worker %s after %.3g s and was replaced "
            "(response %r)%s",
            "ran past the timeout" if why == "it timed out" else "exited",
            job.timeout_s,
            excerpt,
            "; further ones are logged at debug level" if first else "",
        )

    def close(self, grace_s: float = 1.0) -> None:
        """Stop every worker and driver; queued verifications fail. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            drivers = list(self._drivers)
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None and job.future.set_running_or_notify_cancel():
                job.future.set_exception(VerifierPoolError("the math verifier pool was closed"))
        for _ in drivers:
            self._jobs.put(None)
        deadline = time.monotonic() + grace_s
        for driver in drivers:
            driver.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            leftover = list(self._workers)
        for worker in leftover:  # busy with a slow input: no reason to wait for it
            worker.kill()
        for driver in drivers:
            driver.join(grace_s)

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_default: VerifierPool | None = None
_default_lock = threading.Lock()


def default_pool() -> VerifierPool:
    """The process-wide pool behind `verify`, made on first use (again after a fork)."""
    global _default
    with _default_lock:
        if _default is None or _default._pid != os.getpid() or _default._closed:
            _default = VerifierPool()
            atexit.register(_default.close)
        return _default
