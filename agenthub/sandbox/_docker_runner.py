"""The supervisor that runs as init of each sandbox container (standard library only).

It reads one JSON request per line on its stdin (the host holds an attached socket) and
answers one JSON report per line on its stdout. It runs as root in a container that has no
capabilities but SETUID, SETGID and KILL. Per request it empties the work dir, writes the
files, runs `python3 main.py` as an unprivileged user with the request's limits, kills it at
the deadline, kills and reaps every process the user left behind, and reports. As init it
cannot be killed from inside the container.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import time
from typing import Any

BOX = "/box"
UID = 65534
MiB = 1024 * 1024
# Once the program has exited, output still in the pipes is read for this long; background
# processes may hold the pipes open forever.
DRAIN_S = 0.05


def main() -> None:
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        try:
            report = serve(json.loads(line))
        except Exception as exc:  # the host must get an answer; it then replaces the container
            report = {"error": f"supervisor failed: {type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()


def serve(request: dict[str, Any]) -> dict[str, Any]:
    files = {name: base64.b64decode(data) for name, data in request["files"].items()}
    stdin_fd = os.memfd_create("stdin")
    os.write(stdin_fd, base64.b64decode(request["stdin"]))
    os.lseek(stdin_fd, 0, os.SEEK_SET)
    oom_before = _oom_kills()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            ["python3", "main.py"],
            cwd="/",
            stdin=stdin_fd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": BOX,
                "TMPDIR": BOX,
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
            },
            user=UID,
            group=UID,
            extra_groups=[],
            start_new_session=True,
            preexec_fn=lambda: _prepare(files, request["memory_mb"]),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        os.close(stdin_fd)
        return {"error": f"could not start the program: {exc}"}
    os.close(stdin_fd)
    out, err, truncated, reason = _collect(proc, start + request["timeout_s"], request["cap"])
    leftover = _kill_all() if reason else False
    exit_code = proc.wait()
    duration = time.monotonic() - start
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    leftover = _kill_all() or leftover
    _reap_orphans()
    return {
        "exit_code": exit_code,
        "stdout": base64.b64encode(out).decode(),
        "stderr": base64.b64encode(err).decode(),
        "truncated": truncated,
        "timed_out": reason == "timeout",
        "output_limit": reason == "output_limit",
        "oom_killed": _oom_kills() > oom_before,
        "duration_s": duration,
        "leftover": leftover,
        "disk_full": _disk_full(),
    }


def _prepare(files: dict[str, bytes], memory_mb: int) -> None:
    """In the child, after it became the unprivileged user: a clean work dir, then limits."""
    os.chdir(BOX)
    for name in os.listdir(BOX):
        _force_remove(os.path.join(BOX, name))
    for name, data in files.items():
        path = os.path.join(BOX, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    limit = memory_mb * MiB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _force_remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        # A previous run may have made a directory unreadable to block the clean-up.
        os.chmod(path, 0o700)
        for name in os.listdir(path):
            _force_remove(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.unlink(path)


def _collect(
    proc: subprocess.Popen[bytes], deadline: float, cap: int
) -> tuple[bytes, bytes, bool, str | None]:
    assert proc.stdout is not None and proc.stderr is not None
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    selector = selectors.DefaultSelector()
    for fd in buffers:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    exited_at: float | None = None
    truncated = False
    reason: str | None = None
    while selector.get_map() and reason is None:
        now = time.monotonic()
        if now >= deadline:
            reason = "timeout"
            break
        if exited_at is None and proc.poll() is not None:
            exited_at = now
        if exited_at is not None and now - exited_at > DRAIN_S:
            break
        for key, _ in selector.select(min(deadline - now, 0.05)):
            fd = int(key.fd)
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                selector.unregister(fd)
                continue
            buffer = buffers[fd]
            room = cap - len(buffer)
            buffer += data[:room]
            if len(data) > room:
                truncated = True
                reason = "output_limit"
                break
    selector.close()
    out, err = buffers.values()
    return bytes(out), bytes(err), truncated, reason


def _user_processes() -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) == UID and not fields["State"].strip().startswith("Z"):
            pids.append(int(entry))
    return pids


def _kill_all() -> bool:
    """Kill every process but init and this one; True if the user had any left running."""
    found = bool(_user_processes())
    for _ in range(200):
        # From init, kill(-1) reaches every other process in the container's pid namespace;
        # a fork bomb may fork during one sweep, hence the loop.
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        if not _user_processes():
            break
        time.sleep(0.005)
    return found


def _oom_kills() -> int:
    for path, key in (
        ("/sys/fs/cgroup/memory.events", "oom_kill"),
        ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
    ):
        try:
            with open(path) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except OSError:
            continue
    return 0


def _disk_full() -> bool:
    stat = os.statvfs(BOX)
    return stat.f_bavail * stat.f_frsize < 256 * 1024


def _reap_orphans() -> None:
    """As init, this process inherits every orphan; reap the dead so none stays a zombie."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


if __name__ == "__main__":
    main()
