"""Restarting the real Docker engine under a test, the way scripts/setup.sh starts it, and
always leaving it running and answering afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

LOG = "/var/log/agenthub-dockerd.log"  # scripts/setup.sh's
PID_FILES = ("/var/run/docker.pid", "/var/run/docker/containerd/containerd.pid")


def answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


def dockerd_pid() -> int | None:
    # Live states only: a dockerd killed a moment ago is still listed, as a zombie.
    found = subprocess.run(
        ["pgrep", "-xo", "--runstates", "D,R,S", "dockerd"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(found.stdout.split()[0]) if found.returncode == 0 else None


def stop(timeout_s: float = 60.0) -> None:
    """SIGTERM dockerd and wait for it to exit (it stops its containers first)."""
    pid = dockerd_pid()
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while dockerd_pid() is not None:
        if time.monotonic() > deadline:
            raise AssertionError(f"dockerd (pid {pid}) did not stop within {timeout_s} s")
        time.sleep(0.2)


def start(timeout_s: float = 60.0) -> None:
    """Start dockerd exactly as scripts/setup.sh does and wait until it answers."""
    if dockerd_pid() is None:
        for path in PID_FILES:
            with suppress(FileNotFoundError):
                os.remove(path)
        # As a session leader, setsid forks dockerd off and exits: dockerd is nobody's child
        # here, as under setup.sh.
        # Without what vLLM set in this process for itself (LD_PRELOAD of torch's libgomp): a
        # dockerd that kept it would fail every container once this venv is gone.
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        subprocess.Popen(
            ["setsid", "sh", "-c", f"exec dockerd >{LOG} 2>&1"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        ).wait(timeout=30)
    deadline = time.monotonic() + timeout_s
    while not answers():
        if time.monotonic() > deadline:
            raise AssertionError(f"dockerd does not answer {timeout_s} s after its start")
        time.sleep(0.5)


def children(pid: int) -> list[str]:
    """The live processes whose parent is `pid`, as their command lines."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, NotADirectoryError):
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if ppid == str(pid) and state != "Z":
            found.append((entry / "cmdline").read_text().replace("\0", " "))
    return found


@contextmanager
def restartable_engine() -> Iterator[None]:
    """The engine answers before and after, whatever the test in between did or failed."""
    start()
    try:
        yield
    finally:
        start()
