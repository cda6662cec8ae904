"""The code_exec env's logic against in-process sandboxes: extraction, feedback, reward."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import agenthub
from agenthub.envs.code_exec import (
    CodeExecEnv,
    FunctionTests,
    IOTests,
    extract_code,
    generate_tasks,
    parse_spec,
    read_code_tasks,
)
from agenthub.sandbox import (
    ExecResult,
    ExecStatus,
    FakeSandbox,
    SandboxError,
    UnisolatedSandbox,
)
from agenthub.testing import check_env
from tests.code_tasks import function_task

pytestmark = pytest.mark.anyio


ADD = function_task(
    "add", "assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0"
)


def fenced(code: str) -> str:
    return f"Here you go:\n```python\n{code}\n```\nDone."


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        ("```python\nx = 1\n```", "x = 1\n"),
        ("```py\nx = 1\n``` and ```python\ny = 2\n```", "y = 2\n"),
        ("```\nx = 1\n```", "x = 1\n"),
        ("```python\ndef add(a, b):\n    return a + b", "def add(a, b):\n    return a + b"),
        ("def f(x):\n    return x\n", "def f(x):\n    return x\n"),
        ("I think the answer is 42.", None),
        ("42", None),
        ("", None),
        ("```bash\nls\n```", None),
    ],
)
def test_code_is_extracted_from_replies(reply: str, code: str | None) -> None:
    assert extract_code(reply) == code


def test_the_block_defining_the_entry_point_wins() -> None:
    reply = (
        "```python\ndef add(a, b):\n    return a+b\n```\nUsage:\n```python\nprint(add(1, 2))\n```"
    )
    assert extract_code(reply, "add") == "def add(a, b):\n    return a+b\n"


async def test_a_correct_answer_ends_the_episode_with_full_reward() -> None:
    env = CodeExecEnv(sandbox=FakeSandbox())
    await env.reset(ADD, seed=0)
    step = await env.step(fenced("def add(a, b):\n    return a + b"))
    assert (step.reward, step.terminated, step.score) == (1.0, True, 1.0)
    assert step.info["passed"] == 3 and step.extra_logs["pass_fraction"] == 1.0


async def test_failing_tests_come_back_as_feedback_until_the_turn_limit() -> None:
    env = CodeExecEnv(sandbox=FakeSandbox(), max_turns=2)
    await env.reset(ADD, seed=0)
    first = await env.step(fenced("def add(a, b):\n    return a * b"))
    assert not first.done and first.reward == 0.0
    feedback = first.observation[0].content
    assert "Test 1 of 3 failed: assert add(1, 2) == 3" in feedback
    assert "add(1, 2) returned 2, expected 3" in feedback
    assert "Passed 2 of 3 tests" in feedback and "1 attempt left" in feedback
    last = await env.step(fenced("def add(a, b):\n    return 4"))
    assert last.terminated and last.reward == pytest.approx(1 / 3) and last.score == 0.0


async def test_all_or_nothing_gives_zero_for_a_partial_answer() -> None:
    env = CodeExecEnv(sandbox=FakeSandbox(), max_turns=1, all_or_nothing=True)
    await env.reset(ADD, seed=0)
    step = await env.step(fenced("def add(a, b):\n    return 4"))
    assert step.terminated and step.reward == 0.0


async def test_errors_and_missing_code_are_explained() -> None:
    env = CodeExecEnv(sandbox=FakeSandbox(), max_turns=5)
    await env.reset(ADD, seed=0)
    no_code = await env.step("I would add them.")
    assert "found no code" in no_code.observation[0].content
    crash = await env.step(fenced("def add(a, b):\n    return a + undefined_name"))
    assert "NameError: name 'undefined_name' is not defined" in crash.observation[0].content
    broken = await env.step(fenced("def add(a, b) return a"))
    assert "failed before the tests ran" in broken.observation[0].content
    assert "SyntaxError" in broken.observation[0].content
    other = await env.step(fenced("def plus(a, b):\n    return a + b"))
    assert "does not define 'add'" in other.observation[0].content


async def test_printing_fake_results_does_not_pass_tests() -> None:
    env = CodeExecEnv(sandbox=FakeSandbox(), max_turns=1)
    await env.reset(ADD, seed=0)
    forged = (
        "import sys\n"
        'for i in range(3): sys.__stdout__.write(\'{"test": %d, "passed": true}\\n\' % i)\n'
        "def add(a, b): return 0"
    )
    step = await env.step(fenced(forged))
    assert step.reward == pytest.approx(1 / 3)


FORGERIES = {
    "patches the harness": (
        "import __main__, sys\n"
        "for m in list(sys.modules.values()):\n"
        "    if hasattr(m, 'check'): m.check = lambda *a: None\n"
        "    if hasattr(m, 'judge'): m.judge = lambda *a: None\n"
        "def add(a, b): return 0"
    ),
    "walks the stack for the reporter": (
        "import sys, json\n"
        "f = sys._getframe()\n"
        "while f:\n"
        "    for v in list(f.f_locals.values()) + list(f.f_globals.values()):\n"
        "        if callable(v) and getattr(v, '__name__', '') in ('report', 'send'):\n"
        "            for i in range(3): v(test=i, passed=True, error=None, value=-1)\n"
        "    f = f.f_back\n"
        "def add(a, b): return 0"
    ),
    "returns an object equal to everything": (
        "class Any:\n    def __eq__(self, other): return True\ndef add(a, b): return Any()"
    ),
    "returns an int that equals everything": (
        "class Int(int):\n"
        "    def __eq__(self, other): return True\n"
        "    __hash__ = int.__hash__\n"
        "def add(a, b): return Int(0)"
    ),
    "reads the expected values from the harness files": (
        "import glob, re\n"
        "text = ''.join(open(p, errors='replace').read() for p in glob.glob('*'))\n"
        "pairs = re.findall(r'add\\((\\d+), (\\d+)\\) == (\\d+)', text)\n"
        "table = {(int(a), int(b)): int(c) for a, b, c in pairs}\n"
        "def add(a, b): return table.get((a, b), 0)"
    ),
    "searches its own memory for the expected values": (
        "import gc, re\n"
        "text = repr([o for o in gc.get_objects() if isinstance(o, (dict, list, tuple))])\n"
        "pairs = re.findall(r'add\\((\\d+), (\\d+)\\) == (\\d+)', text)\n"
        "table = {(int(a), int(b)): int(c) for a, b, c in pairs}\n"
        "def add(a, b): return table.get((a, b), 0)"
    ),
    "reads the job again from its stdin": (
        "import os, re\n"
        "try:\n"
        "    os.lseek(0, 0, os.SEEK_SET)\n"
        "except OSError:\n"
        "    pass\n"
        "text = os.read(0, 1 << 20).decode(errors='replace')\n"
        "pairs = re.findall(r'add\\((\\d+), (\\d+)\\) == (\\d+)', text)\n"
        "table = {(int(a), int(b)): int(c) for a, b, c in pairs}\n"
        "def add(a, b): return table.get((a, b), 0)"
    ),
    "writes passing lines to every open descriptor": (
        "import os, json\n"
        "line = (json.dumps({'test': 0, 'passed': True}) + '\\n').encode()\n"
        "for fd in range(1, 10):\n"
        "    try: os.write(fd, line.replace(b'0', str(fd % 3).encode(), 1))\n"
        "    except OSError: pass\n"
        "def add(a, b): return 0"
    ),
}


@pytest.mark.parametrize("how", sorted(FORGERIES))
async def test_code_that_tries_to_forge_its_results_passes_nothing(how: str) -> None:
    # A real process per program, its stdin a memfd as in the isolating sandboxes.
    async with UnisolatedSandbox() as sandbox:
        env = CodeExecEnv(sandbox=sandbox, max_turns=1)
        await env.reset(ADD, seed=0)
        step = await env.step(fenced(FORGERIES[how]))
    # add(0, 0) == 0 is the one test that `return 0` passes honestly.
    assert step.reward <= 1 / 3 + 1e-9, (how, step.info)


async def test_a_process_the_tested_code_leaves_behind_does_not_hold_up_the_results(
    tmp_path: Path,
) -> None:
    # The grandchild keeps the tested child's stdout and stderr open long after it exited;
    # the harness reads until the child is gone, not until every holder of its pipes is: the
    # results come back while the grandchild still sleeps, before it leaves its mark.
    mark = tmp_path / "the grandchild ended"
    lingering = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    time.sleep(30)\n"
        f"    open({str(mark)!r}, 'w').close()\n"
        "    os._exit(0)\n"
        "def add(a, b): return a + b"
    )
    async with UnisolatedSandbox() as sandbox:
        env = CodeExecEnv(sandbox=sandbox, max_turns=1, test_timeout_s=2.0)
        await env.reset(ADD, seed=0)
        step = await env.step(fenced(lingering))
        ended_first = mark.exists()
    assert step.reward == 1.0, step.info
    assert not ended_first, "the harness waited for the grandchild"


async def test_tests_that_are_not_literal_comparisons_still_run() -> None:
    task = function_task(
        "half",
        "assert abs(half(3) - 1.5) < 1e-9",
        "assert half(4) == half(2) * 2",
        "assert half(2)",
        "assert half(1) == 0.5",
        "assert half(8) == (4.0)",
    )
    env = CodeExecEnv(sandbox=FakeSandbox(), max_turns=2)
    await env.reset(task, seed=0)
    wrong = await env.step(fenced("def half(x):\n    return x // 2"))
    assert wrong.info["passed"] == 3, wrong.info  # abs(1 - 1.5) and half(1) == 0 fail
    assert "Test 1 of 5 failed: assert abs(half(3) - 1.5) < 1e-9" in wrong.observation[0].content
    right = await env.step(fenced("def half(x):\n    return x / 2"))
    assert right.reward == 1.0 and right.terminated


AREA = function_task(
    "area",
    "assert math.isclose(area(2), 12.566, rel_tol=1e-3)",
    "assert abs(area(1) - 3.14159) < 1e-3",
    "assert area(3) > area(2) > 0, 'grows with r'",
    "assert all(area(r) > 0 for r in range(1, 4))",  # not liftable: runs in the child
    setup="import math",
)


async def test_tests_with_calls_inside_expressions_are_judged_outside_the_tested_code() -> None:
    env = CodeExecEnv(sandbox=FakeSandbox(), max_turns=2)
    await env.reset(AREA, seed=0)
    honest = await env.step(fenced("import math\ndef area(r):\n    return math.pi * r * r"))
    assert honest.reward == 1.0, honest.info
    # Patching what the tests use only fools the tests that run whole in the tested process.
    forged = (
        "import math, builtins\n"
        "math.isclose = lambda *a, **k: True\n"
        "builtins.abs = lambda x: 0\n"
        "builtins.all = lambda xs: True\n"
        "def area(r): return 0.0"
    )
    await env.reset(AREA, seed=0)
    step = await env.step(fenced(forged))
    assert step.info["passed"] == 1, step.info  # only the comprehension test, run in the child
    assert "area(2) returned 0.0" in step.observation[0].content


async def test_a_call_that_changes_its_argument_is_tested_where_it_ran() -> None:
    # The harness has its own `xs` from the setup, unsorted: this test must run in the child.
    task = function_task(
        "sort_in_place",
        "assert sort_in_place(xs) is None and xs == [1, 2, 3]",
        setup="xs = [3, 1, 2]",
    )
    env = CodeExecEnv(sandbox=FakeSandbox(), max_turns=1)
    await env.reset(task, seed=0)
    step = await env.step(fenced("def sort_in_place(xs):\n    xs.sort()"))
    assert step.reward == 1.0, step.info


@pytest.mark.parametrize("turn", [1, 2])
async def test_a_sandbox_failure_fails_the_episode_instead_of_scoring_zero(turn: int) -> None:
    # Killed containers or a vanished engine say nothing about the code: an episode trained on
    # as a zero (or fed "the sandbox failed" as feedback) would teach the model a lie.
    gone = ExecResult(ExecStatus.SANDBOX_ERROR, detail="the Docker engine does not answer")
    runs = iter([ExecResult(ExecStatus.OK)] * (turn - 1) + [gone])
    env = CodeExecEnv(sandbox=FakeSandbox(lambda request: next(runs)), max_turns=2)
    await env.reset(ADD, seed=0)
    for _ in range(turn - 1):
        assert not (await env.step(fenced("def add(a, b):\n    return a - b"))).done
    with pytest.raises(SandboxError, match="the Docker engine does not answer"):
        await env.step(fenced("def add(a, b):\n    return a + b"))


@pytest.mark.parametrize(
    "status",
    [
        ExecStatus.TIMEOUT,
        ExecStatus.MEMORY_LIMIT,
        ExecStatus.OUTPUT_LIMIT,
        ExecStatus.KILLED,
        ExecStatus.RUNTIME_ERROR,
    ],
)
async def test_what_the_code_does_to_itself_is_scored_not_raised(status: ExecStatus) -> None:
    env = CodeExecEnv(sandbox=FakeSandbox(lambda request: ExecResult(status)), max_turns=1)
    await env.reset(ADD, seed=0)
    step = await env.step(fenced("def add(a, b):\n    return a + b"))
    assert step.terminated and step.reward == 0.0 and step.info["status"] == str(status)


async def test_aclose_closes_the_sandbox_and_step_needs_reset() -> None:
    fake = FakeSandbox()
    env = CodeExecEnv(sandbox=fake)
    with pytest.raises(RuntimeError, match="before reset"):
        await env.step("x")
    await env.aclose()
    assert fake.closed == 1


def test_generated_tasks_are_seeded_split_and_carry_references() -> None:
    first = list(generate_tasks("train", 50, seed=3))
    assert first == list(generate_tasks("train", 50, seed=3))
    assert first != list(generate_tasks("train", 50, seed=4))
    held_out = list(generate_tasks("held_out", 50, seed=3))
    assert not {t.prompt for t in first} & {t.prompt for t in held_out}
    families = {t.metadata["family"] for t in itertools.chain(first, held_out)}
    assert families == {"arith", "list", "string", "io"}
    for task in first:
        reference = str(task.metadata["reference"])
        assert reference.startswith("```python\n") and reference.endswith("```")
        parse_spec(task.label)
    with pytest.raises(ValueError, match="splits"):
        list(generate_tasks("test", 1))


async def test_every_reference_passes_its_tests_and_every_mistake_fails_them() -> None:
    tasks = list(generate_tasks("train", 40)) + list(generate_tasks("held_out", 20))
    assert {t.metadata["family"] for t in tasks} == {"arith", "list", "string", "io"}
    async with UnisolatedSandbox() as sandbox:
        env = CodeExecEnv(sandbox=sandbox, max_turns=1)
        for task in tasks:
            await env.reset(task, seed=0)
            step = await env.step(str(task.metadata["reference"]))
            assert step.reward == 1.0, (task.prompt, step.info)
            await env.reset(task, seed=0)
            step = await env.step(str(task.metadata["mistake"]))
            assert step.reward == 0.0, (task.prompt, task.metadata["mistake"], step.info)


async def test_io_tasks_feed_stdin_to_a_real_process() -> None:
    task = next(t for t in generate_tasks("train", 50) if t.metadata["family"] == "io")
    assert isinstance(parse_spec(task.label), IOTests)
    async with UnisolatedSandbox() as sandbox:
        env = CodeExecEnv(sandbox=sandbox, max_turns=2)
        await env.reset(task, seed=0)
        wrong = await env.step(fenced("print(input())"))
        assert "printed" in wrong.observation[0].content
        assert "expected" in wrong.observation[0].content


async def test_mbpp_and_humaneval_files_load_and_their_references_pass(fixtures: Path) -> None:
    mbpp = list(read_code_tasks(fixtures / "code_mbpp.jsonl"))
    humaneval = list(read_code_tasks(fixtures / "code_humaneval.jsonl", format="humaneval"))
    assert [t.id for t in mbpp] == ["2", "3"]
    spec = parse_spec(humaneval[0].label)
    assert isinstance(spec, FunctionTests) and len(spec.tests) == 3
    loop = parse_spec(humaneval[1].label)
    assert isinstance(loop, FunctionTests) and loop.tests == ("check(double_all)",)
    assert parse_spec(mbpp[0].label).entry_point == "similar_elements"  # type: ignore[union-attr]
    env = CodeExecEnv(sandbox=FakeSandbox(), max_turns=1)
    for task in mbpp + humaneval:
        await env.reset(task, seed=0)
        assert (await env.step(str(task.metadata["reference"]))).reward == 1.0
    # HumanEval answers may give only the body: the prompt's signature is prepended.
    await env.reset(humaneval[1], seed=0)
    body = "```python\n    return [x + x for x in xs]\n```"
    assert (await env.step(body)).reward == 1.0


def test_bad_task_files_say_where(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "?"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1.*cannot tell the format"):
        list(read_code_tasks(bad))


def test_the_env_keeps_the_contract_with_a_fake_sandbox() -> None:
    check_env(lambda: CodeExecEnv(sandbox=FakeSandbox(), num_tasks=2))


def test_tasks_come_from_files_when_given(fixtures: Path) -> None:
    env = agenthub.make(
        "code_exec",
        backend="unisolated",
        dataset=str(fixtures / "code_mbpp.jsonl"),
        eval_dataset=str(fixtures / "code_humaneval.jsonl"),
    )
    assert len(list(env.tasks("train"))) == 2
    assert len(list(env.tasks("held_out"))) == 2
    # A file for one split only: the other is not the generated tasks, silently.
    only_train = agenthub.make(
        "code_exec", backend="unisolated", dataset=str(fixtures / "code_mbpp.jsonl")
    )
    with pytest.raises(agenthub.NoTaskSourceError, match="pass eval_dataset=FILE too"):
        only_train.tasks("held_out")
