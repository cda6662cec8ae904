"""A Docker engine of a test's own (`private_engine`), for a test that restarts it: every other
test's containers are on the machine's engine, which it leaves alone. It answers again after
each restart, whatever the test did."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


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


class PrivateEngine:
    """A dockerd of a test's own beside the machine's: its own socket, data and exec roots under
    `root`, and no networking (the sandboxes' containers have none). A test points agenthub at
    it with `DOCKER_HOST` (`host`); restarting it touches no other test, so such a test need
    not run alone."""

    def __init__(self, root: Path) -> None:
        self.root = root  # short: a unix socket's path must fit in 108 bytes
        self.host = f"unix://{root}/docker.sock"
        self._pid_file = root / "docker.pid"

    def pid(self) -> int | None:
        try:
            pid = int(self._pid_file.read_text())
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ValueError):
            return None
        return None if state == "Z" else pid

    def answers(self) -> bool:
        info = ["docker", "--host", self.host, "info"]
        return subprocess.run(info, capture_output=True, check=False).returncode == 0

    def sandboxes_created(self) -> int:
        """How many of agenthub's sandbox containers this engine has created since it last
        started (from its events, which it keeps in memory: a pool may have none up at a
        given moment)."""
        from agenthub.sandbox._docker_engine import CONTAINER_LABEL

        events = [
            "docker", "--host", self.host, "events", "--since", "0", "--until", str(time.time()),
            "--filter", "event=create", "--filter", f"label={CONTAINER_LABEL}",
        ]  # fmt: skip
        listed = subprocess.run(events, capture_output=True, text=True, check=True, timeout=60)
        return len(listed.stdout.splitlines())

    def start(self, timeout_s: float = 60.0) -> None:
        """Start it unless it runs, and wait until it answers. Without what vLLM set in this
        process for itself (LD_PRELOAD of torch's libgomp), which would fail its containers
        once the venv is gone."""
        if self.pid() is None:
            self._pid_file.unlink(missing_ok=True)
            command = [
                "dockerd", "--host", self.host, "--pidfile", str(self._pid_file),
                "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
                "--bridge=none", "--iptables=false", "--ip6tables=false",
            ]  # fmt: skip
            env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
            with (self.root / "dockerd.log").open("a") as log:
                subprocess.Popen(
                    command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True,
                )  # fmt: skip
        _wait_for(self.answers, timeout_s, f"the private dockerd at {self.host}")

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM it and wait for it to exit (it stops its containers first)."""
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        _wait_for(lambda: self.pid() is None, timeout_s, f"the private dockerd (pid {pid}) to stop")

    def load(self, image: str) -> None:
        """Copy `image` from the machine's engine into this one."""
        machine = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
        saved = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE, env=machine)
        loaded = subprocess.run(
            ["docker", "--host", self.host, "load", "--quiet"],
            stdin=saved.stdout, capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        saved.wait(timeout=60)
        assert saved.returncode == 0 and loaded.returncode == 0, loaded.stderr

    @contextmanager
    def restartable(self) -> Iterator[None]:
        """It answers before and after, whatever the test in between did or failed."""
        self.start()
        try:
            yield
        finally:
            self.start()


@contextmanager
def private_engine() -> Iterator[PrivateEngine]:
    """A private engine holding the sandbox image, stopped and removed afterwards."""
    from agenthub.sandbox._docker import IMAGE

    engine = PrivateEngine(Path(tempfile.mkdtemp(prefix="ahd-")))
    try:
        engine.start()
        engine.load(IMAGE)
        yield engine
    finally:
        engine.stop()
        shutil.rmtree(engine.root, ignore_errors=True)


def _wait_for(ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        time.sleep(0.2)
