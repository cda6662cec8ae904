import gc
import itertools
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agenthub
from agenthub import CheckEnvError, Env, Message, Step, Task, TaskFileError
from agenthub.testing import acheck_env, check_env
from agenthub.testing._held import HeldClock, _run_queue_s
from agenthub.wrappers import TurnLimit

from . import _envs


def test_a_good_env_passes_as_instance_factory_and_wrapped() -> None:
    check_env(_envs.CountdownEnv())
    check_env(lambda: _envs.CountdownEnv(delay_s=0.001))
    check_env(TurnLimit(_envs.EndlessEnv(), max_turns=5))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (_envs.EndlessEnv(), "did not end within 32 steps.*TurnLimit"),
        (_envs.UnseededEnv(), "two episodes with seed=0 .* differed.*np_random"),
        (_envs.GlobalRandomEnv(), "differed.*drew from the global `random` module.*np_random"),
        (_envs.GlobalNumpyRandomEnv(), "differed.*drew from the global `numpy.random` module"),
        (_envs.BadInfoEnv(), "step info is not JSON-serialisable"),
        (
            _envs.RaisingEnv(),
            r"step #1 .* raised ValueError: cannot parse an empty reply \(raised at .*_envs\.py:",
        ),
        (_envs.WrongObservationEnv(), "observation of type dict"),
        (_envs.CloseOnceEnv(), "the second aclose\\(\\) raised RuntimeError"),
        (_envs.BrokenAfterCancelEnv(), "not usable again after a cancelled reset"),
        (
            _envs.SeedlessResetEnv(),
            r"SeedlessResetEnv.reset\(task: 'Task'\) cannot be called as agenthub calls it; it "
            r"must be `async def reset\(self, task, \*, seed=None\)`",
        ),
        (
            _envs.IdlessTaskEnv(),
            r"(?s)env.tasks\('train'\) raised ValidationError: .*\nid\n  Field required.*"
            r"\(raised at .*_envs\.py:\d+, in tasks\)",
        ),
    ],
)
def test_contract_breaches_are_reported_with_a_fix(env: Env, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(CheckEnvError, match=message):
        check_env(env)


def test_a_bad_line_in_the_env_s_task_file_is_the_data_s_error(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text('{"prompt": "1+1?", "label": "2"}\n{"label": "3"}\n')
    with pytest.raises(TaskFileError, match=rf"^{re.escape(str(data))}:2: .*'prompt'") as raised:
        check_env(agenthub.make("math", dataset=str(data)))
    assert "raised at" not in str(raised.value)


@pytest.mark.parametrize(
    ("split", "bad", "message"),
    [
        ("dataset", 7, r": .*'prompt' and 'label'; this one has \['label'\]"),
        ("eval_dataset", 2, " is not valid JSON"),
    ],
)
def test_a_bad_line_deep_in_either_split_s_task_file_fails_the_check(
    tmp_path: Path, split: str, bad: int, message: str
) -> None:
    # Only the first two train tasks were read: eval or train met the bad line later.
    lines = [f'{{"prompt": "{n}+1?", "label": "{n + 1}"}}' for n in range(9)]
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines) + "\n")
    lines[bad - 1] = '{"label": "3"}' if "label" in message else "{not json"
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(lines) + "\n")
    files = {"dataset": str(good), "eval_dataset": str(good), split: str(data)}
    with pytest.raises(TaskFileError, match=rf"^{re.escape(str(data))}:{bad}{message}"):
        check_env(agenthub.make("math", **files))


def test_endless_tasks_are_read_only_so_far() -> None:
    class Generated(_envs.CountdownEnv):
        drawn = 0

        def tasks(self, split: str = "train") -> Iterator[Task]:
            for i in itertools.count():
                self.drawn += 1
                yield Task(id=f"{split}-{i}", prompt="Count down with me.", label=2)

    env = Generated()
    check_env(env)
    assert 2 * 10_000 <= env.drawn < 2 * 10_000 + 10


def test_a_system_prompt_that_is_not_text_is_reported() -> None:
    class Listed(_envs.CountdownEnv):
        system_prompt = ("Count down.",)  # type: ignore[assignment]

    with pytest.raises(CheckEnvError, match=r"Listed.system_prompt must be text or None, got \("):
        check_env(Listed())
    check_env(type("Ruled", (_envs.CountdownEnv,), {"system_prompt": "Count down."})())


def test_stop_strings_that_are_not_a_list_of_strings_are_reported() -> None:
    class OneString(_envs.CountdownEnv):
        stop = "</search>"  # type: ignore[assignment]

    with pytest.raises(CheckEnvError, match=r"OneString.stop must be a list of strings.*\("):
        check_env(OneString())

    class Listed(_envs.CountdownEnv):
        stop = ("</search>",)

    check_env(Listed())


def test_env_without_tasks_needs_tasks_given() -> None:
    class NoTasks(_envs.CountdownEnv):
        def tasks(self, split: str = "train"):  # type: ignore[no-untyped-def]
            return Env.tasks(self, split)

    with pytest.raises(CheckEnvError, match="pass tasks="):
        check_env(NoTasks())
    check_env(NoTasks(), tasks=[Task(id="x", prompt="p", label=2)])


def test_no_tasks_to_play_is_a_failure_not_a_pass() -> None:
    class Empty(_envs.CountdownEnv):
        def tasks(self, split: str = "train") -> Iterator[Task]:
            return iter([])

    with pytest.raises(CheckEnvError, match="no tasks to check: tasks=\\[\\] was given"):
        check_env(_envs.CountdownEnv(), tasks=[])
    with pytest.raises(CheckEnvError, match="no tasks to check: env.tasks\\('train'\\) yielded"):
        check_env(Empty())


def test_tasks_that_raise_are_a_problem_not_a_traceback() -> None:
    class MissingData(_envs.CountdownEnv):
        def tasks(self, split: str = "train") -> Iterator[Task]:
            raise FileNotFoundError(f"no such file: data/{split}.jsonl")

    with pytest.raises(CheckEnvError, match="env.tasks\\('train'\\) raised FileNotFoundError"):
        check_env(MissingData())


@pytest.mark.parametrize(
    ("where", "call", "fix"),
    [
        ("tasks", "env.tasks\\('train'\\)", "yield tasks as they are read"),
        ("reset", "reset\\(task 'train-0'\\)", "anyio.to_thread.run_sync"),
        ("step", "step #1 of task 'train-0' with action ''", "anyio.to_thread.run_sync"),
        ("aclose", "the first aclose\\(\\)", "anyio.to_thread.run_sync"),
    ],
)
def test_a_call_that_blocks_the_event_loop_is_reported(where: str, call: str, fix: str) -> None:
    # fail_after cannot interrupt time.sleep; only a loop kept waiting shows it.
    with pytest.raises(CheckEnvError, match=f"{call} blocked the event loop for [0-9.]+ s.*{fix}"):
        check_env(_envs.BlockingEnv(where))


class _StarvesItsLoop:
    """Mixed in before an env: its first `reset` pins the thread it runs on (the event loop's)
    to our first CPU under SCHED_IDLE, behind a busy loop there. Only that thread: the
    check's watchdog, started before, and the process's other threads keep their CPUs and
    priority. (Starved too, a thread holding the GIL would keep the loop waiting for it, which
    no clock can take out, agenthub/testing/_held.py: the test's doing, not a busy machine's.)"""

    async def reset(self, task: Task, *, seed: int | None = None) -> Any:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # 0: the calling thread
        # SCHED_IDLE rather than nice 19: a nice-19 thread still got ~1.4% of the core, enough
        # on a warm process for a check to pass with too short a wait to test anything.
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return await super().reset(task, seed=seed)  # type: ignore[misc]


class _StarvedCountdown(_StarvesItsLoop, _envs.CountdownEnv):
    pass


class _StarvedSleep(_StarvesItsLoop, _envs.BlockingEnv):
    pass


BUSY_S = 2.0  # how long each core is kept busy: the starved loop barely runs meanwhile


def _checked_while_the_cores_are_busy(env: Env[Any]) -> tuple[str, float]:
    """`check_env`'s verdict on `env` at the default `max_block_s` (0.25 s), on a thread of its
    own, while a busy loop runs on each core for `BUSY_S`; and how long that thread waited for
    a CPU meanwhile."""
    spin = "import time\nend = time.monotonic() + {}\nprint(flush=True)\n"
    spin += "while time.monotonic() < end: pass"
    cpus = sorted(os.sched_getaffinity(0))
    busy = [
        subprocess.Popen([sys.executable, "-c", spin.format(BUSY_S)], stdout=subprocess.PIPE)
        for _ in cpus
    ]
    verdict, waited = ["the check never ended"], [0.0]

    def check() -> None:
        before = _run_queue_s(threading.get_native_id())
        try:
            check_env(env, tasks=[next(iter(env.tasks("train")))])
            verdict[0] = "passed"
        except CheckEnvError as exc:
            verdict[0] = str(exc)
        waited[0] = _run_queue_s(threading.get_native_id()) - before

    try:
        for cpu, process in zip(cpus, busy, strict=True):
            os.sched_setaffinity(process.pid, {cpu})
        for process in busy:  # spinning from here, so the env's first reset waits behind them
            assert process.stdout is not None and process.stdout.readline() == b"\n"
        checker = threading.Thread(target=check)
        checker.start()
        checker.join()
    finally:
        for process in busy:
            process.kill()
            process.wait()
    return verdict[0], waited[0]


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux's scheduler counts")
def test_a_busy_machine_does_not_fail_a_correct_env_and_a_sleep_still_does() -> None:
    # A trivial env failed with "step #1 ... blocked the event loop for 0.61 s" on a CI machine
    # busy with other work. Here a busy loop keeps each core busy and the loop's thread runs
    # behind them, so it waits for a CPU far longer than the limit: that wait is the
    # machine's, while the other env's `time.sleep` is its own.
    check_env(_envs.CountdownEnv())  # its first run imports and compiles
    # The scheduler now and then runs the starved thread's few milliseconds of work before the
    # busy loops take its core: no test of the wait, so the check runs again (up to 3 times).
    for _ in range(3):
        trivial, waited = _checked_while_the_cores_are_busy(_StarvedCountdown())
        assert trivial == "passed"
        if waited > 4 * 0.25:
            break
    assert waited > 4 * 0.25, f"the loop waited only {waited:.2f} s for a CPU: no test of it"
    sleeps, _ = _checked_while_the_cores_are_busy(_StarvedSleep("step", 0.4))
    blocked = re.search(r"step #1 .* blocked the event loop for ([0-9.]+) s", sleeps)
    assert blocked and float(blocked[1]) >= 0.4, sleeps


def test_the_held_clock_counts_a_sleep_and_not_a_garbage_collection() -> None:
    with HeldClock() as clock:
        started = clock.now()
        time.sleep(0.05)
        slept = clock.now() - started
        garbage = [[[i]] for i in range(100_000)]
        started, wall = clock.now(), time.monotonic()
        gc.collect()
        collected, wall = clock.now() - started, time.monotonic() - wall
        del garbage
    assert slept >= 0.05
    assert collected < wall / 2, "the collector's pass is not the loop's code holding it"


def test_a_call_blocking_the_loop_past_the_timeout_is_named_while_it_blocks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A call that never returned hung the test without a word: nothing can interrupt it, but
    # the watchdog names it meanwhile, and the check fails once it returns.
    with caplog.at_level(logging.WARNING, logger="agenthub.testing"):
        with pytest.raises(CheckEnvError):
            check_env(_envs.BlockingEnv("step", block_s=1.5), timeout_s=0.5)
        assert re.search(
            r"step #1 of task 'train-0' with action '' has blocked the event loop for [0-9.]+ s "
            r"\(longer than timeout_s=0.5\), at .*_envs\.py:\d+ in block_once "
            r"\(time\.sleep\(self\.block_s\)\).*anyio\.to_thread\.run_sync",
            caplog.text,
        ), caplog.text


def test_a_call_blocking_inside_a_library_is_named_at_the_env_s_own_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The innermost frame outside the standard library was named: httpcore's socket read,
    # not the env's `httpx.get(...)`.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        threading.Thread(target=_answer_late, args=(server,), daemon=True).start()
        url = f"http://127.0.0.1:{server.getsockname()[1]}/"
        logged = caplog.at_level(logging.WARNING, logger="agenthub.testing")
        with logged, pytest.raises(CheckEnvError):
            check_env(_envs.SyncHttpEnv(url), timeout_s=0.5)
    assert re.search(r"_envs\.py:\d+ in step \(httpx\.get\(self\.url", caplog.text), caplog.text


def _answer_late(server: socket.socket) -> None:
    """Answer the first request after 1.5 s, and later ones at once until none comes for 2 s."""
    server.settimeout(2)
    for delay in (1.5, *[0.0] * 50):
        try:
            connection, _ = server.accept()
        except OSError:
            return
        with connection:
            connection.recv(65536)
            time.sleep(delay)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


@pytest.mark.anyio
async def test_acheck_env_warns_of_a_call_blocking_its_caller_s_loop_past_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The caller's own loop is blocked, so the check cannot give up; it says so meanwhile.
    blocked = pytest.raises(CheckEnvError, match="step #1 .* blocked the event loop for")
    with caplog.at_level(logging.WARNING, logger="agenthub.testing"), blocked:
        await acheck_env(_envs.BlockingEnv("step", block_s=1.0), timeout_s=0.5)
    assert "step #1 of task 'train-0' with action '' has blocked the event loop" in caplog.text
    assert "in block_once (time.sleep(self.block_s))" in caplog.text


def test_an_env_that_only_awaits_is_not_taken_for_one_blocking_under_a_short_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The watchdog measured from the loop's last answer, up to a beat (0.25 s) before it asked
    # again, so any timeout_s under that reported a block where an env merely awaited (as
    # this one, on that code). Each await is far inside timeout_s: a busy machine can delay
    # an await's end by a tenth of a second, which would be a timeout.
    with caplog.at_level(logging.WARNING):
        check_env(_envs.CountdownEnv(delay_s=0.02), timeout_s=0.2)
    assert "blocked the event loop" not in caplog.text


class _BlocksTwiceEnv(_envs.CountdownEnv):
    """Blocks the loop briefly in its first reset, then far longer in its first step."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = {"reset": 0.3, "step": 0.9}

    def block(self, where: str) -> None:
        time.sleep(self.blocks.pop(where, 0.0))

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.block("reset")
        return await super().reset(task, seed=seed)

    async def step(self, action: str) -> Step[list[Message]]:
        self.block("step")
        return await super().step(action)


def test_the_longest_block_of_the_loop_is_the_one_reported() -> None:
    # Only the first block was: a 0.3 s reset hid the 0.9 s step after it.
    with pytest.raises(CheckEnvError) as raised:
        check_env(_BlocksTwiceEnv())
    blocks = [p for p in raised.value.problems if "blocked the event loop" in p]
    assert len(blocks) == 1 and blocks[0].startswith("step #1 "), blocks
    seconds = re.search(r"for ([0-9.]+) s", blocks[0])
    assert seconds and float(seconds[1]) >= 0.9, blocks


def test_a_limit_that_is_not_above_zero_is_refused() -> None:
    with pytest.raises(ValueError, match=r"timeout_s \(0\) and max_block_s \(0.25\) must be"):
        check_env(_envs.CountdownEnv(), timeout_s=0)


class _SlowSourceEnv(_envs.CountdownEnv):
    """Its task source sets up for `setup_s`, then draws a task every 2 ms without end, and
    stalls once for `stall_s` at the held-out split's fifth task; a split named in `missing`
    raises KeyError."""

    def __init__(self, setup_s: float = 0.0, stall_s: float = 0.0, missing: str = "") -> None:
        super().__init__()
        self.setup_s, self.stall_s, self.missing = setup_s, stall_s, missing

    def tasks(self, split: str = "train") -> Iterator[Task]:
        if split == self.missing:
            raise KeyError(split)
        time.sleep(self.setup_s)
        for i in itertools.count():
            time.sleep(0.002 + (self.stall_s if split == "held_out" and i == 4 else 0.0))
            yield Task(id=f"{split}-{i}", prompt="Count down with me.", label=i % 3 + 2)


def test_a_slow_endless_task_source_is_read_without_being_taken_for_a_block(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Both splits were read back to back without the loop running: their time added up past
    # timeout_s, and `agenthub envs check` failed an env that never blocked for long.
    with caplog.at_level(logging.WARNING):
        check_env(_SlowSourceEnv(setup_s=0.2), timeout_s=1.0)
    assert "blocked the event loop" not in caplog.text


def test_a_task_source_that_stalls_is_reported_with_what_to_do() -> None:
    with pytest.raises(CheckEnvError) as raised:
        check_env(_SlowSourceEnv(stall_s=0.5), timeout_s=2.0)
    [problem] = raised.value.problems
    assert re.match(r"env\.tasks\('held_out'\) blocked the event loop for 0\.\d+ s", problem)
    assert problem.endswith(
        "give its reads a timeout, and yield tasks as they are read rather "
        "than loading the whole source first"
    )


def test_a_held_out_split_an_env_lacks_is_told_to_raise_no_task_source_error() -> None:
    with pytest.raises(CheckEnvError) as raised:
        check_env(_SlowSourceEnv(missing="held_out"), timeout_s=2.0)
    assert raised.value.problems[0].startswith("env.tasks('held_out') raised KeyError")
    assert "raises NoTaskSourceError for it" in raised.value.problems[0]


def test_the_blocking_limit_can_be_raised() -> None:
    check_env(_envs.BlockingEnv("step"), max_block_s=2.0)


class GuessEnv(Env[list[Message]]):
    """One guess per episode; the winning branch alone is broken (its reward is text)."""

    answer = ""

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.answer = str(task.metadata.get("reference", task.label))
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        if action == self.answer:
            return Step([], reward="1", terminated=True)  # type: ignore[arg-type]
        return Step([Message(role="user", content="No.")], 0.0, terminated=True)


@pytest.mark.parametrize(
    "task",
    [
        Task(id="capital", prompt="Capital of France?", label="Paris"),
        Task(id="capital", prompt="Capital of France?", label=0, metadata={"reference": "Paris"}),
        Task(id="capital", prompt="Dozen plus one?", label=13),
    ],
)
def test_the_answer_is_played_so_a_broken_winning_branch_shows(task: Task) -> None:
    answer = task.metadata.get("reference", task.label)
    message = f"step #1 of task 'capital' with action '{answer}' raised TypeError: Step.reward"
    with pytest.raises(CheckEnvError, match=message):
        check_env(GuessEnv(), tasks=[task])


def test_a_list_of_dicts_as_observation_is_named_with_the_fix() -> None:
    class DictMessages(_envs.CountdownEnv):
        async def step(self, action: str) -> Step[Any]:
            step = await super().step(action)
            return Step([{"role": "user", "content": "hi"}], step.reward, step.terminated)

    message = (
        "step returned an observation that is a list of dict; .*"
        "wrap each item as agenthub.Message\\(role=..., content=...\\)"
    )
    with pytest.raises(CheckEnvError, match=message):
        check_env(DictMessages())


def test_plain_def_methods_are_told_to_be_async_def() -> None:
    class PlainStep(_envs.CountdownEnv):
        def step(self, action: str) -> Step[list[Message]]:  # type: ignore[override]
            return Step([], 1.0, terminated=True)

        def aclose(self) -> None:  # type: ignore[override]
            pass

    with pytest.raises(CheckEnvError) as raised:
        check_env(TurnLimit(PlainStep(), max_turns=2))
    assert [p.split(":")[0] for p in raised.value.problems] == [
        "PlainStep.step must be `async def step(self, action)`, not def",
        "PlainStep.aclose must be `async def aclose(self)`, not def",
    ]


def test_not_an_env_is_reported() -> None:
    with pytest.raises(CheckEnvError, match="not a subclass of agenthub.Env"):
        check_env(lambda: object())  # type: ignore[arg-type,return-value]


def test_slow_env_times_out_instead_of_hanging() -> None:
    with pytest.raises(CheckEnvError, match="did not return within 0.05 s"):
        check_env(_envs.CountdownEnv(delay_s=1.0), timeout_s=0.05)


def test_tasks_given_that_are_not_tasks_are_blamed_on_the_caller() -> None:
    given: Any = [{"id": "0", "prompt": "Count down."}]
    with pytest.raises(CheckEnvError, match=r"check_env\(tasks=...\) holds dict, not agenthub"):
        check_env(_envs.CountdownEnv(), tasks=given)


@pytest.mark.anyio
async def test_check_env_in_a_running_event_loop_points_at_acheck_env() -> None:
    with pytest.raises(RuntimeError, match=r"await agenthub.testing.acheck_env\(env, ...\)"):
        check_env(_envs.CountdownEnv())


def test_tasks_given_as_an_iterator_are_all_played() -> None:
    # An iterator (as agenthub.read_tasks returns) was used up by the type check: nothing ran.
    with pytest.raises(CheckEnvError, match=r"step #1 .* raised ValueError"):
        check_env(_envs.RaisingEnv(), tasks=iter(list(_envs.RaisingEnv().tasks())[:1]))


@pytest.mark.parametrize("given", [Task(id="0", prompt="p"), {"id": "0", "prompt": "p"}, "p"])
def test_tasks_that_are_not_a_list_say_so(given: Any) -> None:
    name = type(given).__name__
    with pytest.raises(CheckEnvError, match=rf"must be a list of agenthub.Task, got {name}$"):
        check_env(_envs.CountdownEnv(), tasks=given)


def test_a_tasks_that_is_not_a_method_is_named() -> None:
    class Listed(_envs.CountdownEnv):
        tasks = [Task(id="0", prompt="p")]  # type: ignore[assignment]  # noqa: RUF012

    with pytest.raises(CheckEnvError, match=r"Listed.tasks must be a method `def tasks\(self"):
        check_env(Listed())
