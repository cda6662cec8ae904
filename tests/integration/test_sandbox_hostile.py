"""Hostile programs against the real docker and bwrap backends: every one ends in bounded
time with a status, leaves nothing running, and the next run on the same sandbox succeeds."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from agenthub.sandbox import (
    BwrapSandbox,
    DockerSandbox,
    ExecResult,
    ExecStatus,
    Limits,
    Sandbox,
    _process,
)
from agenthub.sandbox._process import BWRAP_UIDS

pytestmark = [pytest.mark.integration, pytest.mark.anyio, pytest.mark.timeout(120)]

TIMEOUT_S = 5.0
# Generous: a docker container that hit a limit is replaced before `run` returns, and the
# machines running CI are shared.
MARGIN_S = 20.0
S = ExecStatus

HOSTILE: dict[str, tuple[str, set[ExecStatus]]] = {
    "infinite_loop": ("while True:\n    pass", {S.TIMEOUT}),
    "fork_bomb": (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        {S.TIMEOUT},
    ),
    "memory_hog": ("hog = []\nwhile True:\n    hog.append(bytearray(10**7))", {S.MEMORY_LIMIT}),
    "huge_allocation": ("x = bytearray(8 * 10**9)", {S.MEMORY_LIMIT}),
    "disk_filling": (
        "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * 2**20)",
        {S.RUNTIME_ERROR},
    ),
    "output_flood": ("while True:\n    print('x' * 1000)", {S.OUTPUT_LIMIT}),
    "stderr_flood": ("import sys\nwhile True:\n    sys.stderr.write('y' * 1000)", {S.OUTPUT_LIMIT}),
    "non_utf8_output": ("import sys\nsys.stdout.buffer.write(bytes(range(256)))", {S.OK}),
    "background_process": (
        "import subprocess\nsubprocess.Popen(['sleep', '1000'])\nprint('started')",
        {S.OK},
    ),
    "escaping_daemon": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(1000)\n    os._exit(0)\nprint('parent done')",
        {S.OK},
    ),
    "kill_pid_1": (
        "import os, signal, time\ntry:\n    os.kill(1, signal.SIGKILL)\nexcept OSError as e:\n"
        "    print(type(e).__name__)\ntime.sleep(0.2)\nprint('still here')",
        {S.OK},
    ),
    # kill(-1) spares the caller itself; it must not reach the supervisor or init.
    "kill_everything": (
        "import os, signal\nos.kill(-1, signal.SIGKILL)",
        {S.OK, S.KILLED, S.RUNTIME_ERROR},
    ),
    "segfault": ("import ctypes\nctypes.string_at(0)", {S.KILLED}),
}


@pytest.fixture(params=["docker", "bwrap"])
async def sandbox(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox]:
    limits = Limits(timeout_s=TIMEOUT_S, memory_mb=256, output_bytes=64 * 1024, disk_mb=16)
    box: Sandbox = (
        DockerSandbox(pool_size=1, limits=limits)
        if request.param == "docker"
        else BwrapSandbox(limits=limits, concurrency=1)
    )
    async with box:
        yield box
    assert not _bwrap_processes(), "bwrap runs left processes behind"


def _bwrap_processes() -> list[int]:
    """Live processes of bwrap sandbox uids that no run holds (zombies wait for the host's
    init to reap them; they no longer run). A run holds its uid's lock while it runs, so a
    process of a free uid was left behind."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if not entry.isdigit() or (uid := os.stat(f"/proc/{entry}").st_uid) not in BWRAP_UIDS:
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state != "Z" and not _held(uid):
            found.append(int(entry))
    return found


def _held(uid: int) -> bool:
    fd = _process.try_lock(uid)
    if fd is None:
        return True
    os.close(fd)
    return False


def _leftovers(sandbox: Sandbox) -> list[str]:
    if isinstance(sandbox, DockerSandbox):
        # Only the pool's init may run in an idle container.
        assert sandbox.live_containers() <= sandbox.pool_size
        return [
            " ".join(process)
            for channel in sandbox._idle
            for process in channel.container.top()["Processes"]
            if "python3 -I -S -c" not in " ".join(process)
        ]
    return [str(pid) for pid in _bwrap_processes()]


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_hostile_program_is_contained(sandbox: Sandbox, case: str) -> None:
    code, expected = HOSTILE[case]
    start = time.monotonic()
    result = await sandbox.run(code)
    elapsed = time.monotonic() - start
    assert result.status in expected, (result.status, result.stderr[-300:], result.detail)
    assert elapsed < TIMEOUT_S + MARGIN_S
    assert len(result.stdout.encode()) <= 64 * 1024 and len(result.stderr.encode()) <= 64 * 1024
    if case == "disk_filling":
        assert "No space left on device" in result.stderr
    if case == "non_utf8_output":
        assert "\ufffd" in result.stdout and result.stdout.startswith("\x00\x01")
    if case in ("output_flood", "stderr_flood"):
        assert result.truncated
    follow = await sandbox.run("import os\nprint(sorted(os.listdir('.')))")
    assert follow.status is ExecStatus.OK and follow.stdout == "['main.py']\n"
    assert _leftovers(sandbox) == []


async def test_no_connection_reaches_a_listener_on_the_host_loopback(sandbox: Sandbox) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    code = (
        "import socket\n"
        f"for host in ('127.0.0.1', 'localhost', {socket.gethostname()!r}):\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=1)\n"
        "        print('connected', host)\n"
        "    except OSError as e:\n"
        "        print('blocked', host, type(e).__name__)\n"
    )
    try:
        result = await sandbox.run(code)
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert result.status is ExecStatus.OK, result.stderr
    assert "connected" not in result.stdout and result.stdout.count("blocked") == 3
    assert accepted == []


async def test_host_files_cannot_be_read_or_written(sandbox: Sandbox, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret")
    targets = ["/etc/agenthub-probe", "/usr/agenthub-probe", "/tmp/agenthub-probe", "/probe"]
    targets.append(str(tmp_path / "written-from-sandbox"))
    code = (
        "import json\nout = {}\n"
        f"try:\n    out['read'] = open({str(secret)!r}).read()\n"
        "except OSError as e:\n    out['read'] = type(e).__name__\n"
        f"for path in {targets!r}:\n"
        "    try:\n        open(path, 'w').write('x')\n        out[path] = 'written'\n"
        "    except OSError as e:\n        out[path] = type(e).__name__\n"
        "print(json.dumps(out))\n"
    )
    result = await sandbox.run(code)
    assert result.status is ExecStatus.OK, result.stderr
    report = json.loads(result.stdout)
    assert report["read"] != "the host's secret"
    assert all(report[path] != "written" for path in targets), report
    written = await anyio.to_thread.run_sync(
        lambda: [p for p in ("/probe", "/tmp/agenthub-probe", targets[-1]) if os.path.exists(p)]
    )
    assert written == []


async def test_stdin_files_and_a_clean_work_dir_per_run(sandbox: Sandbox) -> None:
    code = (
        "import sys\nprint(sys.stdin.read().upper(), open('data/in.txt').read())\n"
        "open('scratch', 'w').write('left over')"
    )
    result = await sandbox.run(code, stdin="hello", files={"data/in.txt": "payload"})
    assert result.status is ExecStatus.OK and result.stdout == "HELLO payload\n"
    again = await sandbox.run("import os\nprint(sorted(os.listdir('.')))")
    assert again.stdout == "['main.py']\n"
    failed = await sandbox.run("import sys\nsys.exit(3)")
    assert (failed.status, failed.exit_code) == (ExecStatus.RUNTIME_ERROR, 3)


@pytest.mark.parametrize("anyio_backend", [pytest.param(("asyncio", {"use_uvloop": True}))])
async def test_bwrap_runs_on_uvloop_as_an_unprivileged_user() -> None:
    # uvloop (Ray actors' loop, and many harnesses') refuses open_process(user=...): the
    # sandbox drops to its own user another way, and a hostile program is still contained.
    async with BwrapSandbox(limits=Limits(timeout_s=TIMEOUT_S), concurrency=1) as box:
        who = await box.run("import os\nprint(os.getuid(), os.getgid(), os.getgroups())")
        bomb = await box.run(HOSTILE["fork_bomb"][0])
    assert who.status is ExecStatus.OK, who
    if os.geteuid() == 0:  # as root the sandbox switches to its own user, group and no others
        uid, gid, groups = who.stdout.split(" ", 2)
        assert int(uid) in BWRAP_UIDS and gid == uid and groups == "[]\n", who
    assert bomb.status is ExecStatus.TIMEOUT and not _bwrap_processes()


async def test_runs_of_two_bwrap_sandboxes_leave_each_other_alone() -> None:
    # Every sandbox, in this process or another (two rollout workers on one machine, eval
    # beside training), counts its slots from 0. As root a run's uid is swept when it ends,
    # which must not reach a run of another sandbox.
    limits = Limits(timeout_s=TIMEOUT_S)
    slow: dict[str, ExecResult] = {}
    one, other = BwrapSandbox(limits=limits, concurrency=1), BwrapSandbox(limits=limits)

    async def run_slowly() -> None:
        slow["result"] = await one.run("import time\ntime.sleep(2)\nprint('done')")

    async with one, other, anyio.create_task_group() as group:
        group.start_soon(run_slowly)
        await anyio.sleep(0.5)
        quick = [await other.run("print('quick')") for _ in range(3)]
    assert all(q.status is ExecStatus.OK for q in quick), quick
    assert slow["result"].status is ExecStatus.OK and slow["result"].stdout == "done\n", slow


# As any other user a run has no uid to take; tests/unit/test_sandbox_types.py checks the leases.
@pytest.mark.skipif(os.geteuid() != 0, reason="bwrap runs take a uid of their own only as root")
async def test_a_bwrap_run_finding_every_uid_taken_is_a_sandbox_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_process, "BWRAP_UIDS", range(61990, 61991))
    with _process._uid_lease(61990):  # as another run on the machine holds it
        async with BwrapSandbox(limits=Limits(timeout_s=TIMEOUT_S), concurrency=1) as box:
            result = await box.run("print('ran')")
    assert result.status is ExecStatus.SANDBOX_ERROR, result
    assert "are in use by runs on this machine; run fewer at once" in result.detail
