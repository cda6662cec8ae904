"""The docker backend's pool: how containers are locked down, cancellation, leftovers of
crashed runs, Ctrl-C, and a 500-run soak with hostile programs mixed in."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from agenthub.sandbox import DockerSandbox, ExecStatus, Limits
from agenthub.sandbox._docker_engine import CONTAINER_LABEL, OWNER_LABEL, connect

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def containers_of(pid: int) -> list[Any]:
    client = connect(timeout_s=30)
    try:
        return [
            c
            for c in client.containers.list(
                all=True, filters={"label": CONTAINER_LABEL}, ignore_removed=True
            )
            if c.labels.get(OWNER_LABEL, "").split(":")[1] == str(pid)
        ]
    finally:
        client.close()


@pytest.mark.timeout(120)
async def test_pool_containers_are_locked_down() -> None:
    async with DockerSandbox(pool_size=1, limits=Limits(memory_mb=256, pids=32)) as sandbox:
        await sandbox.start()
        container = sandbox._idle[0].container
        container.reload()
        host = container.attrs["HostConfig"]
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"] and set(host["CapAdd"]) == {"SETUID", "SETGID", "KILL"}
        assert host["Memory"] > 0 and host["PidsLimit"] > 0 and host["NanoCpus"] > 0
        assert "no-new-privileges" in host["SecurityOpt"]
        assert container.attrs["Mounts"] == [] and not host["Binds"]
        probe = await sandbox.run(
            "import os\n"
            "print(os.path.exists('/var/run/docker.sock'), os.path.exists('/run/docker.sock'))\n"
            "print(os.getuid(), os.getcwd())"
        )
        assert probe.stdout == "False False\n65534 /box\n"


@pytest.mark.timeout(120)
async def test_a_cancelled_run_removes_its_container_and_the_pool_recovers() -> None:
    async with DockerSandbox(pool_size=1, limits=Limits(timeout_s=60)) as sandbox:
        await sandbox.start()
        busy = sandbox._idle[0].container
        with anyio.move_on_after(1.5) as waited:
            await sandbox.run("while True:\n    pass")
        assert waited.cancelled_caught, "the run was cancelled, not waited for (60 s)"
        assert busy.id not in {c.id for c in containers_of(os.getpid())}
        assert (await sandbox.run("print('after')")).stdout == "after\n"
        assert sandbox.live_containers() == 1
    assert containers_of(os.getpid()) == []


@pytest.mark.timeout(240)
async def test_a_container_that_hit_a_limit_is_replaced_never_reused() -> None:
    limits = Limits(timeout_s=3, memory_mb=128, output_bytes=64 * 1024)
    async with DockerSandbox(pool_size=1, limits=limits) as sandbox:
        await sandbox.start()
        clean = sandbox._idle[0].container.id
        assert (await sandbox.run("print('fine')")).status is ExecStatus.OK
        assert sandbox._idle[0].container.id == clean, "a clean run keeps its container"
        for code, status in [
            ("while True:\n    pass", ExecStatus.TIMEOUT),
            ("x = bytearray(512 << 20)\nprint(len(x))", ExecStatus.MEMORY_LIMIT),
            ("print('x' * (1 << 20))", ExecStatus.OUTPUT_LIMIT),
        ]:
            used = sandbox._idle[0].container.id
            assert (await sandbox.run(code)).status is status
            after = await sandbox.run("print('next')")
            assert after.stdout == "next\n", (status, after)
            assert sandbox._idle[0].container.id != used, f"reused after {status}"
            assert used not in {c.id for c in containers_of(os.getpid())}
    assert containers_of(os.getpid()) == []


def test_auto_falls_back_to_bwrap_and_never_runs_unisolated_by_itself() -> None:
    probe = (
        "from agenthub.sandbox import SandboxUnavailableError, resolve_backend\n"
        "print(resolve_backend('auto'))\n"
        "try:\n"
        "    print(resolve_backend('auto', image='agenthub-sandbox:no-such-tag'))\n"
        "except SandboxUnavailableError as exc:\n"
        "    print('refused:', exc)\n"
    )

    def run(env: dict[str, str]) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert run(dict(os.environ)) == ["docker", "bwrap"]
    # Without bubblewrap on PATH and without the image, nothing isolating is left: refused.
    first, *rest = run({**os.environ, "PATH": "/nonexistent"})
    assert first == "docker"
    assert rest[0].startswith("refused: no isolating sandbox works here")
    assert "bubblewrap is not installed" in rest[0] and "backend='unisolated'" in rest[0]


CRASHING_OWNER = textwrap.dedent(
    """
    import anyio, os, sys
    from agenthub.sandbox import DockerSandbox

    async def main():
        sandbox = DockerSandbox(pool_size=2)
        await sandbox.start()
        first = await sandbox.run("print(1)")
        second = await sandbox.run("print(2)")
        print("ready", first.stdout.strip(), second.stdout.strip(), flush=True)
        await anyio.sleep(600)

    anyio.run(main)
    """
)


@pytest.mark.timeout(180)
def test_the_containers_of_a_killed_owner_exit_and_are_removed() -> None:
    # SIGKILL, a double Ctrl-C or a lost terminal runs no clean-up code; the containers must
    # not keep running until some later run happens to start.
    owner = subprocess.Popen(
        [sys.executable, "-c", CRASHING_OWNER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "ready 1 2\n"
        pool = {c.id for c in containers_of(owner.pid)}
        time.sleep(3.0)
        assert {c.id for c in containers_of(owner.pid)} == pool and len(pool) == 2, (
            "a live owner keeps its pool"
        )
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 30
    while containers_of(owner.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert containers_of(owner.pid) == []


NEVER_STARTED = textwrap.dedent(
    """
    import sys
    from agenthub.sandbox import IMAGE
    from agenthub.sandbox._docker_engine import CONTAINER_LABEL, OWNER_LABEL, connect, owner

    # What an owner killed between creating a container and attaching to it leaves behind.
    labels = {CONTAINER_LABEL: "1", OWNER_LABEL: owner()}
    container = connect().containers.create(IMAGE, command=["true"], labels=labels)
    print(container.id, flush=True)
    """
)


@pytest.mark.timeout(180)
def test_containers_of_a_crashed_process_are_removed_at_the_next_start() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", NEVER_STARTED], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _, err = owner.communicate(timeout=120)
    assert owner.returncode == 0, err
    assert len(containers_of(owner.pid)) == 1

    async def next_start() -> None:
        async with DockerSandbox(pool_size=1) as sandbox:
            await sandbox.start()
            assert containers_of(owner.pid) == []
            assert len(containers_of(os.getpid())) == 1

    anyio.run(next_start)


@pytest.mark.timeout(180)
def test_ctrl_c_stops_a_cli_run_and_removes_its_containers(tmp_path: Path) -> None:
    program = tmp_path / "spin.py"
    program.write_text("print('spinning', flush=True)\nwhile True:\n    pass\n")
    cli = subprocess.Popen(
        [sys.executable, "-m", "agenthub", "sandbox", "run", str(program), "--backend", "docker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not containers_of(cli.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert containers_of(cli.pid), "the CLI never started a container"
        time.sleep(1.0)
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=60)
    finally:
        cli.kill()
    assert cli.returncode != 0 and "interrupted" in err
    assert containers_of(cli.pid) == []


SOAK_RUNS = 500
HOSTILE = [
    "while True:\n    pass",
    "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "hog = []\nwhile True:\n    hog.append(bytearray(10**7))",
    "while True:\n    print('x' * 1000)",
    "import subprocess\nsubprocess.Popen(['sleep', '1000'])",
    "open('big', 'wb').write(b'x' * 10**8)",
]


@pytest.mark.timeout(900)
async def test_soak_500_runs_with_a_tenth_hostile_leaves_only_the_pool() -> None:
    rng = random.Random(0)
    plan = [rng.choice(HOSTILE) if i % 10 == 0 else f"print({i} * {i})" for i in range(SOAK_RUNS)]
    # Hostile runs get 4 s; benign ones (milliseconds of work) a wide margin, because on a
    # loaded 2-core machine a run can wait seconds for a CPU and must not count as a timeout.
    limits = Limits(timeout_s=4.0, memory_mb=128, output_bytes=16 * 1024, disk_mb=16)
    benign = dataclasses.replace(limits, timeout_s=30.0)
    wrong: list[str] = []
    async with DockerSandbox(pool_size=2, limits=limits) as sandbox:
        limiter = anyio.Semaphore(4)

        async def one(i: int, code: str) -> None:
            async with limiter:
                result = await sandbox.run(code, limits=limits if i % 10 == 0 else benign)
            if i % 10 and (result.status is not ExecStatus.OK or result.stdout != f"{i * i}\n"):
                wrong.append(f"run {i}: {result}")
            if i % 10 == 0 and result.status is ExecStatus.SANDBOX_ERROR:
                wrong.append(f"run {i}: {result}")

        async with anyio.create_task_group() as group:
            for i, code in enumerate(plan):
                group.start_soon(one, i, code)
        assert wrong == []
        mine = containers_of(os.getpid())
        assert len(mine) == sandbox.live_containers() <= 2
        for container in mine:
            processes = [" ".join(p) for p in container.top()["Processes"]]
            assert len(processes) == 1 and "python3 -I -S -c" in processes[0], processes
    assert containers_of(os.getpid()) == []
