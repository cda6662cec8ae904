"""code_exec through the real sandboxes: references pass, wrong code gets feedback, and the
`agenthub sandbox run` command works by hand."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import agenthub
from agenthub.envs.code_exec import generate_tasks, read_code_tasks
from tests.code_tasks import function_task

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["docker", "bwrap"])
async def test_references_pass_and_mistakes_get_feedback(backend: str, fixtures: Path) -> None:
    tasks = list(generate_tasks("held_out", 8)) + list(
        read_code_tasks(fixtures / "code_humaneval.jsonl")
    )
    assert {t.metadata.get("family") for t in tasks} >= {"io"}
    envs = [agenthub.make("code_exec", backend=backend, max_turns=2) for _ in range(3)]
    try:
        for n, task in enumerate(tasks):
            env = envs[n % len(envs)]
            await env.reset(task, seed=0)
            wrong = await env.step("```python\nprint('no idea')\n```")
            assert not wrong.done and "failed" in wrong.observation[0].content
            right = await env.step(str(task.metadata["reference"]))
            assert right.terminated and right.reward == 1.0, (task.id, right.info)
    finally:
        for env in envs:
            await env.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["docker", "bwrap"])
async def test_the_tested_code_cannot_look_into_the_harness_process(backend: str) -> None:
    # The harness holds the nonce and the expected values; it is undumpable, so the code it
    # runs (same user) cannot read its memory, environment or descriptors under /proc.
    task = generate_tasks("held_out", 1).__next__()
    entry = task.label["entry_point"] if task.label.get("kind") == "function" else None
    probe = "import os\nos.listdir(f'/proc/{os.getppid()}/fd')\n"
    env = agenthub.make("code_exec", backend=backend, max_turns=2)
    try:
        await env.reset(task, seed=0)
        reference = str(task.metadata["reference"]).replace("```python\n", "```python\n" + probe)
        step = await env.step(reference)
    finally:
        await env.aclose()
    assert entry is not None, "the first held-out task tests a function"
    assert step.reward == 0.0 and not step.done
    assert "PermissionError" in step.observation[0].content


# Looks for `double(N) == M` in the tested process's memory and in its stdin read again from
# the start (the sandboxes hand the harness its job in a seekable memfd).
SNOOP = r"""
import gc, os, re
try:
    os.lseek(0, 0, os.SEEK_SET)
except OSError:
    pass
try:
    text = os.read(0, 1 << 20).decode(errors="replace")
except OSError:
    text = ""
text += repr([o for o in gc.get_objects() if isinstance(o, (dict, list, tuple))])
table = {int(a): int(b) for a, b in re.findall(r"double\((\d+)\) == (\d+)", text)}
def double(x):
    return table.get(x, -1)
"""


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["docker", "bwrap"])
async def test_the_tested_code_cannot_find_the_expected_values(backend: str) -> None:
    task = function_task("double", "assert double(21) == 42", "assert double(5) == 10")
    env = agenthub.make("code_exec", backend=backend, max_turns=1)
    try:
        await env.reset(task, seed=0)
        step = await env.step(f"```python\n{SNOOP}```")
    finally:
        await env.aclose()
    assert step.info["passed"] == 0, step.info


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["docker", "bwrap"])
async def test_patching_what_a_test_uses_does_not_pass_it(backend: str) -> None:
    # `math.isclose(f(x), y)` is judged by the harness on the value f(x) returned, so patching
    # math.isclose inside the tested process changes nothing.
    task = function_task(
        "area",
        "assert math.isclose(area(2), 12.566, rel_tol=1e-3)",
        "assert abs(area(1) - 3.14159) < 1e-3",
        setup="import math",
    )
    honest = "```python\nimport math\ndef area(r):\n    return math.pi * r * r\n```"
    forged = (
        "```python\nimport math, builtins\nmath.isclose = lambda *a, **k: True\n"
        "builtins.abs = lambda x: 0\ndef area(r):\n    return 0.0\n```"
    )
    env = agenthub.make("code_exec", backend=backend, max_turns=1)
    try:
        await env.reset(task, seed=0)
        assert (await env.step(honest)).reward == 1.0
        await env.reset(task, seed=0)
        step = await env.step(forged)
    finally:
        await env.aclose()
    assert step.reward == 0.0 and step.info["passed"] == 0, step.info


def test_sandbox_run_command(tmp_path: Path) -> None:
    program = tmp_path / "echo.py"
    program.write_text("import sys\nprint(sys.stdin.read().strip()[::-1])\n")
    given = tmp_path / "in.txt"
    given.write_text("olleh\n")
    done = subprocess.run(
        [sys.executable, "-m", "agenthub", "sandbox", "run", str(program), "--stdin", str(given)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello\n"
    assert "[sandbox docker] ok exit=0" in done.stderr
    crash = tmp_path / "crash.py"
    crash.write_text("raise SystemExit('bad input')\n")
    failed = subprocess.run(
        [sys.executable, "-m", "agenthub", "sandbox", "run", str(crash), "--backend", "bwrap"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode == 1 and "bad input" in failed.stderr
    assert "[sandbox bwrap] runtime_error exit=1" in failed.stderr


LIMIT_S = 15.0


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["docker", "bwrap"])
async def test_a_process_left_holding_the_output_does_not_hold_up_the_results(
    backend: str,
) -> None:
    # The harness knows the tested child exited from a pidfd, which the sandbox's system-call
    # filter must allow; without one it waits for the pipes until the sandbox's time limit ends
    # the run as a timeout (reward 0). The tests' limit is far above what a step takes on a
    # loaded machine, so only such a wait passes it.
    task = function_task("double", "assert double(21) == 42", "assert double(5) == 10")
    lingering = (
        "```python\nimport os, time\nif os.fork() == 0:\n    time.sleep(300)\n    os._exit(0)\n"
        "def double(x):\n    return 2 * x\n```"
    )
    env = agenthub.make("code_exec", backend=backend, max_turns=1, test_timeout_s=LIMIT_S)
    try:
        await env.reset(task, seed=0)
        started = time.monotonic()
        step = await env.step(lingering)
        took = time.monotonic() - started
    finally:
        await env.aclose()
    assert step.reward == 1.0, step.info
    assert took < LIMIT_S, f"{took:.1f} s: the harness waited for the process left behind"
