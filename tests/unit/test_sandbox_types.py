"""The sandbox seam's shared logic, the fake, and the shared handle (no Docker needed)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agenthub.sandbox import (
    ExecResult,
    ExecStatus,
    FakeSandbox,
    Limits,
    SandboxError,
    SharedSandbox,
    _auto,
    _shared,
    resolve_backend,
)
from agenthub.sandbox._common import RawOutcome, classify, needs_recycle, request_files

pytestmark = pytest.mark.anyio


def raw(**changes: object) -> RawOutcome:
    fields: dict[str, object] = dict(
        exit_code=0,
        stdout=b"",
        stderr=b"",
        truncated=False,
        timed_out=False,
        output_limit=False,
        oom_killed=False,
        duration_s=0.1,
    )
    fields.update(changes)
    return RawOutcome(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "status"),
    [
        ({}, ExecStatus.OK),
        ({"exit_code": 1}, ExecStatus.RUNTIME_ERROR),
        ({"exit_code": -9, "timed_out": True}, ExecStatus.TIMEOUT),
        ({"exit_code": -9, "output_limit": True, "truncated": True}, ExecStatus.OUTPUT_LIMIT),
        ({"exit_code": -9, "oom_killed": True}, ExecStatus.MEMORY_LIMIT),
        ({"exit_code": 1, "stderr": b"Traceback...\nMemoryError\n"}, ExecStatus.MEMORY_LIMIT),
        ({"exit_code": -11}, ExecStatus.KILLED),
    ],
)
def test_raw_outcomes_are_classified(changes: dict[str, object], status: ExecStatus) -> None:
    result = classify(raw(**changes))
    assert result.status is status
    assert needs_recycle(result) == (status not in (ExecStatus.OK, ExecStatus.RUNTIME_ERROR))


def test_output_is_decoded_with_replacement() -> None:
    result = classify(raw(stdout=b"\xff\xfe ok", stderr=b"\xc3("))
    assert result.stdout == "\ufffd\ufffd ok" and result.stderr == "\ufffd("


@pytest.mark.parametrize("name", ["/etc/passwd", "../up.py", "a/../../b", "main.py", ""])
def test_file_names_must_stay_inside_the_work_dir(name: str) -> None:
    with pytest.raises(ValueError, match="relative path inside the work dir"):
        request_files("print(1)", {name: "x"})


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf])
def test_limits_must_be_positive(value: float) -> None:
    with pytest.raises(ValueError, match="timeout_s must be positive and finite"):
        Limits(timeout_s=value)


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown sandbox backend 'chroot'"):
        resolve_backend("chroot")


async def test_fake_runs_trusted_code_in_process_and_records_requests() -> None:
    fake = FakeSandbox()
    result = await fake.run(
        "import sys; print(sys.stdin.read().upper()); raise SystemExit(3)",
        stdin="hi",
        files={"data.txt": "x"},
    )
    assert (result.status, result.exit_code, result.stdout) == (
        ExecStatus.RUNTIME_ERROR,
        3,
        "HI\n",
    )
    assert fake.requests[0].files == {"data.txt": b"x"} and fake.requests[0].stdin == b"hi"
    crashed = await fake.run("1/0")
    assert "ZeroDivisionError" in crashed.stderr
    await fake.aclose()
    with pytest.raises(SandboxError, match="closed"):
        await fake.run("print(1)")


async def test_fake_answers_with_scripted_results() -> None:
    failure = ExecResult(ExecStatus.SANDBOX_ERROR, detail="engine gone")
    fake = FakeSandbox(lambda request: failure)
    assert await fake.run("print(1)") is failure


async def test_shared_handles_share_one_sandbox_until_the_last_closes() -> None:
    # `unisolated` needs nothing installed; what is under test is the sharing.
    first, second = SharedSandbox("unisolated"), SharedSandbox("unisolated")
    assert (await first.run("print(1)")).stdout == "1\n"
    assert (await second.run("print(2)")).stdout == "2\n"
    assert first._entry is second._entry and first._entry is not None
    underlying = first._entry.sandbox
    await first.aclose()
    assert (await second.run("print(3)")).ok
    await second.aclose()
    await second.aclose()
    with pytest.raises(SandboxError, match="closed"):
        await underlying.run("print(4)")
    third = SharedSandbox("unisolated")
    assert (await third.run("print(5)")).ok
    assert third._entry is not None and third._entry.sandbox is not underlying
    await third.aclose()


class Probes:
    """Stands in for the backends' probes: counts Docker probes, answers with `docker`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.docker: str | None = None
        self.calls = 0
        monkeypatch.setattr(_auto, "_chosen", {})
        monkeypatch.setattr(_auto, "docker_problem", self.docker_problem)
        monkeypatch.setattr(_auto, "bwrap_problem", lambda: None)

    def docker_problem(self, image: str | None = None) -> str | None:
        self.calls += 1
        return self.docker


def test_auto_probes_docker_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # A hung engine makes each probe take its whole timeout; every env instance resolves.
    probes = Probes(monkeypatch)
    assert resolve_backend("auto") == resolve_backend("auto") == "docker"
    assert probes.calls == 1
    assert resolve_backend("docker") == "docker" and probes.calls == 2, "named: always checked"


async def test_auto_chooses_again_after_its_choice_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    probes = Probes(monkeypatch)
    gone = ExecResult(ExecStatus.SANDBOX_ERROR, detail="the Docker engine does not answer")
    monkeypatch.setattr(_shared, "open_backend", lambda *a, **k: FakeSandbox(lambda r: gone))
    handle = SharedSandbox("auto")
    assert handle.name == "docker" and probes.calls == 1
    probes.docker = "the Docker engine does not answer"
    assert (await handle.run("print(1)")).status is ExecStatus.SANDBOX_ERROR
    await handle.aclose()
    assert SharedSandbox("auto").name == "bwrap" and probes.calls == 2
    _auto.forget_backend("docker")  # a late failure of the old choice changes nothing
    assert SharedSandbox("auto").name == "bwrap" and probes.calls == 2


def test_public_names_are_exported() -> None:
    import agenthub.envs.code_exec as code_exec
    import agenthub.sandbox as sandbox

    for module in (sandbox, code_exec):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name} is in __all__ but missing"
        public = {n for n in vars(module) if not n.startswith("_")}
        assert public - {"annotations"} <= set(module.__all__), public - set(module.__all__)


def test_bwrap_uid_leases_are_exclusive_taken_in_turn_and_freed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The leases alone, as any user: a run as root takes one before it runs as that uid.
    from agenthub.sandbox import _process

    monkeypatch.setattr(_process, "_lock_dir", lambda: tmp_path)
    monkeypatch.setattr(_process, "BWRAP_UIDS", range(61000, 61002))
    # the second finds the first held and takes the next, wrapping round the range
    with _process._uid_lease(61001) as first, _process._uid_lease(61001) as second:
        assert (first, second) == (61001, 61000)
        with pytest.raises(SandboxError, match="all 2 bwrap sandbox uids .* run fewer"):
            _process._uid_lease(61000).__enter__()
    with _process._uid_lease(61001) as again:
        assert again == 61001, "a lease ended is free again"
