import sys
from pathlib import Path

import pytest

from agenthub import RewardFuncError, Task, make
from agenthub.envs import _openrlhf
from agenthub.envs.reward_func import RewardFunction, load_reward_func
from agenthub.testing import check_env

pytestmark = pytest.mark.anyio


def test_plain_reward_file_scores_and_passes_check_env(fixtures: Path) -> None:
    check_env(
        lambda: make(
            "reward_func",
            reward_func=str(fixtures / "reward_plain.py"),
            dataset=str(fixtures / "tasks.jsonl"),
        )
    )


async def test_outside_a_run_queries_are_the_plain_prompt_plus_response() -> None:
    seen: list[tuple[list[str], list[str], list[object]]] = []

    def reward_func(queries, prompts, labels):  # type: ignore[no-untyped-def]
        seen.append((queries, prompts, labels))
        return {"rewards": [0.5], "scores": [1], "extra_logs": {"n": 3}}

    env = make("reward_func", reward_func=reward_func)
    assert env.spec is None, "a Python callable cannot be rebuilt from JSON"
    task = Task(id="t", prompt=({"role": "user", "content": "2+2?"},), label="4")  # type: ignore[arg-type]
    observation, _ = await env.reset(task)
    step = await env.step("4")
    assert observation == [] and step.observation == []
    assert seen == [(["user: 2+2?\nassistant: 4"], ["user: 2+2?\nassistant: "], ["4"])]
    assert (step.reward, step.score, dict(step.extra_logs)) == (0.5, 1.0, {"n": 3.0})
    assert (step.terminated, step.truncated) == (True, False)
    with pytest.raises(RuntimeError, match="before reset"):
        await env.step("again")


async def test_a_task_without_a_label_is_scored_against_an_empty_label() -> None:
    seen: list[list[object]] = []

    def reward_func(queries, prompts, labels):  # type: ignore[no-untyped-def]
        seen.append(labels)
        return [float(labels[0].strip() in queries[0])]

    env = make("reward_func", reward_func=reward_func)
    await env.reset(Task(id="t", prompt="Say hi."))
    assert (await env.step("hi")).reward == 1.0
    assert seen == [[""]]


async def test_rewards_may_be_numpy_numbers_or_0d_tensors_in_a_list() -> None:
    import numpy as np
    import torch

    cases = [
        ([np.float32(0.5)], 0.5),
        ([torch.tensor(0.25)], 0.25),
        ([np.int64(1)], 1.0),
        ([torch.tensor([0.75])], 0.75),
    ]
    for rewards, expected in cases:
        env = make("reward_func", reward_func=lambda q, p, labels, r=rewards: r)
        await env.reset(Task(id="t", prompt="p"))
        assert (await env.step("a")).reward == expected


def test_a_reward_file_imports_the_modules_beside_it(tmp_path: Path) -> None:
    (tmp_path / "grading_helpers_xyz.py").write_text("def grade(q, label):\n    return 0.25\n")
    (tmp_path / "reward.py").write_text(
        "from grading_helpers_xyz import grade\n\n"
        "def reward_func(queries, prompts, labels):\n"
        "    return [grade(q, l) for q, l in zip(queries, labels)]\n"
    )
    assert load_reward_func(tmp_path / "reward.py")(["q"], ["p"], [""]).rewards == [0.25]


async def test_two_argument_reward_functions_are_called_without_labels() -> None:
    env = make("reward_func", reward_func=lambda queries, prompts: [len(queries[0])])
    await env.reset(Task(id="t", prompt="ab"))
    assert (await env.step("cd")).reward == 4.0


@pytest.mark.parametrize(
    ("label", "message"),
    [
        (
            "raise",
            r"reward_broken.py raised KeyError: 'missing_field' \(samples: \[\"task 'case'\"\]\)",
        ),
        ("nan", r"rewards\[0\] = nan for sample 0 \(task 'case'\); it must be a finite number"),
        ("text", r"rewards\[0\] = 'good'"),
        ("short", r"returned 0 rewards for 1 samples"),
        ("nokey", r"a dict without 'rewards' \(keys: \['reward'\]\)"),
    ],
)
async def test_broken_reward_files_give_errors_naming_file_and_sample(
    fixtures: Path, label: str, message: str
) -> None:
    env = make("reward_func", reward_func=str(fixtures / "reward_broken.py"))
    await env.reset(Task(id="case", prompt="p", label=label))
    with pytest.raises(RewardFuncError, match=message):
        await env.step("response")


def test_reward_files_are_loaded_once_and_reloaded_when_changed(tmp_path: Path) -> None:
    path = tmp_path / "r.py"
    path.write_text("def reward_func(q, p, l):\n    return [1.0]\n")
    first = load_reward_func(path)
    assert load_reward_func(path).func is first.func
    path.write_text("def reward_func(q, p, l):\n    return [2.0]\n")
    import os

    os.utime(path, ns=(1, 10**18))
    assert load_reward_func(path)(["q"], ["p"], [None]).rewards == [2.0]


def test_files_without_reward_func_or_missing_are_clear(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(RewardFuncError, match="defines no function 'reward_func'"):
        load_reward_func(tmp_path / "empty.py")
    with pytest.raises(RewardFuncError, match="does not exist"):
        load_reward_func(tmp_path / "nope.py")
    with pytest.raises(RewardFuncError, match="is not a regular file; give a .py file"):
        load_reward_func(tmp_path)
    (tmp_path / "bad.py").write_text("import no_such_module_abc\n")
    with pytest.raises(RewardFuncError, match="importing .*bad.py raised ModuleNotFoundError"):
        load_reward_func(tmp_path / "bad.py")


_NO_OPENRLHF = (
    "which is not installed: without it, agenthub provides only openrlhf.utils.agent's "
    "AgentInstanceBase, AgentExecutorBase and MultiTurnAgentExecutor, to agent files, and "
    "openrlhf.utils's extract_boxed_answer and grade_answer, to agent and reward files. "
    "pip install openrlhf, or drop that import"
)


def test_a_reward_file_importing_openrlhf_is_told_it_is_not_installed(tmp_path: Path) -> None:
    path = tmp_path / "r.py"
    path.write_text(
        "from openrlhf.utils import get_tokenizer\n\n"
        "def reward_func(q, p, l):\n    return [1.0] * len(q)\n"
    )
    with pytest.raises(RewardFuncError) as raised:
        load_reward_func(path)
    assert str(raised.value) == (
        f"reward function file {path} imports from OpenRLHF (line 1, "
        f"`from openrlhf.utils import get_tokenizer`), {_NO_OPENRLHF}"
    )


def test_a_worker_that_cannot_import_openrlhf_says_so(tmp_path: Path) -> None:
    _openrlhf.install()  # as loading an agent file does here; a worker process has no stand-in
    path = tmp_path / "r.py"
    path.write_text(
        "from openrlhf.utils.agent import AgentInstanceBase\n\n"
        "def reward_func(q, p, l):\n    return [1.0] * len(q)\n"
    )
    function = load_reward_func(path, processes=1)
    with pytest.raises(RewardFuncError) as raised:
        function(["q"], ["p"], [""])
    assert (
        f"could not import the file: reward function file {path} imports from OpenRLHF (line 1, "
        f"`from openrlhf.utils.agent import AgentInstanceBase`), {_NO_OPENRLHF}"
    ) in str(raised.value)


def test_a_failed_import_from_an_installed_openrlhf_is_reported_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    (site / "openrlhf" / "utils").mkdir(parents=True)
    (site / "openrlhf" / "__init__.py").write_text("")
    (site / "openrlhf" / "utils" / "__init__.py").write_text("")
    for name in [m for m in sys.modules if m.partition(".")[0] == "openrlhf"]:
        monkeypatch.delitem(sys.modules, name)  # the stand-in, if an agent file put it there
    monkeypatch.syspath_prepend(str(site))
    path = tmp_path / "r.py"
    path.write_text("from openrlhf.utils import grade_answer\n")
    try:
        with pytest.raises(RewardFuncError) as raised:
            load_reward_func(path)
    finally:
        for name in [m for m in sys.modules if m.partition(".")[0] == "openrlhf"]:
            del sys.modules[name]
    assert str(raised.value).startswith(
        f"importing reward function file {path} raised ImportError: cannot import name "
        "'grade_answer' from 'openrlhf.utils'"
    )


def test_exactly_one_scorer_is_required(fixtures: Path) -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        make("reward_func")
    with pytest.raises(ValueError, match="exactly one of"):
        make("reward_func", reward_func=str(fixtures / "reward_plain.py"), remote_rm_url="http://x")


def test_openrlhf_style_py_path_in_remote_rm_url_is_a_reward_file(fixtures: Path) -> None:
    env = make("reward_func", remote_rm_url=str(fixtures / "reward_plain.py"))
    assert env.spec is not None and env.spec.kwargs["remote_rm_url"].endswith(".py")


def test_tasks_come_from_jsonl_with_ids_labels_and_metadata(fixtures: Path) -> None:
    env = make(
        "reward_func",
        reward_func=str(fixtures / "reward_plain.py"),
        dataset=str(fixtures / "tasks.jsonl"),
    )
    tasks = list(env.tasks("train"))
    assert [t.id for t in tasks] == ["t1", "t2", "tasks-3"]
    assert tasks[1].metadata == {"source": "geo"} and tasks[1].label == "Paris"
    with pytest.raises(Exception, match="pass eval_dataset=FILE too"):
        list(env.tasks("held_out"))


def test_bad_task_files_say_where(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"question": "hi"}\n')
    env = make("reward_func", reward_func=lambda q, p, l: [0.0], dataset=str(path))
    with pytest.raises(
        ValueError, match=r"t.jsonl:1 has no 'prompt' field \(it has \['question'\]\)"
    ) as caught:
        list(env.tasks())
    # The fix for any env first; the field-naming arguments only where the env takes them.
    assert 'Write one {"prompt": ..., "label": ...} object per line, or, with an env that ' in str(
        caught.value
    )


def test_sync_scoring_runs_off_the_event_loop() -> None:
    import threading

    threads: list[str] = []
    func = RewardFunction(lambda q, p, l: threads.append(threading.current_thread().name) or [1.0])
    import anyio

    out = anyio.run(func.ascore, ["q"], ["p"], [None])
    assert out.rewards == [1.0] and threads != [threading.current_thread().name]


_WHERE = """\
import os, threading, time

def reward_func(queries, prompts, labels):
    if labels[0] == "die":
        os._exit(3)
    if labels[0] == "hang":
        time.sleep(3600)
    if labels[0] == "spin":  # one C call that never lets another thread of the worker run
        sum(range(10**18))
    main = threading.current_thread() is threading.main_thread()
    return {"rewards": [1.0], "extra_logs": {"pid": os.getpid(), "main": float(main)}}
"""


def test_a_reward_file_runs_in_the_main_thread_of_worker_processes(tmp_path: Path) -> None:
    path = tmp_path / "where.py"
    path.write_text(_WHERE)
    import os

    out = load_reward_func(path, processes=2)(["q"], ["p"], [""])
    assert out.extra_logs["main"] == [1.0] and out.extra_logs["pid"] != [float(os.getpid())]
    out = load_reward_func(path, processes=0)(["q"], ["p"], [""])
    assert out.extra_logs["pid"] == [float(os.getpid())]


async def test_reward_files_using_math_verify_score_as_in_openrlhf(tmp_path: Path) -> None:
    # math-verify times out with signal.alarm, which it refuses in any but the main thread.
    path = tmp_path / "math_reward.py"
    path.write_text(
        "from math_verify import parse, verify\n\n"
        "def reward_func(queries, prompts, labels):\n"
        "    return [float(verify(parse('$' + str(label) + '$'), parse(q[len(p):])))\n"
        "            for q, p, label in zip(queries, prompts, labels)]\n"
    )
    task = Task(id="sum", prompt="What is 2 + 3?", label="5")
    env = make("reward_func", reward_func=str(path))
    await env.reset(task)
    assert (await env.step("It is $\\frac{10}{2}$.")).reward == 1.0
    threaded = make("reward_func", reward_func=str(path), reward_processes=0)
    await threaded.reset(task)
    with pytest.raises(RewardFuncError, match="main thread: leave reward_processes unset"):
        await threaded.step("It is $5$.")


async def test_a_worker_that_dies_fails_only_its_sample(tmp_path: Path) -> None:
    path = tmp_path / "where.py"
    path.write_text(_WHERE)
    env = make("reward_func", reward_func=str(path), reward_processes=1)
    await env.reset(Task(id="fatal", prompt="p", label="die"))
    with pytest.raises(RewardFuncError, match="worker process scoring task 'fatal' died"):
        await env.step("r")
    await env.reset(Task(id="fine", prompt="p", label=""))
    assert (await env.step("r")).reward == 1.0


def _script(tmp_path: Path, then: str, hang: str = "hang") -> list[str]:
    """A user's script, without a main guard, whose reward worker hangs in a second call."""
    (tmp_path / "where.py").write_text(_WHERE)
    script = tmp_path / "score.py"
    script.write_text(
        "import threading, time\n"
        "from agenthub.envs.reward_func import load_reward_func\n"
        f"f = load_reward_func({str(tmp_path / 'where.py')!r}, processes=1)\n"
        "print(int(f(['q'], ['p'], ['']).extra_logs['pid'][0]), flush=True)\n"
        # Not a daemon, as the threads a call waits in are not: Python waits for them at exit.
        f"threading.Thread(target=f, args=(['q'], ['p'], [{hang!r}])).start()\n"
        f"{then}\n"
    )
    import sys

    return [sys.executable, str(script)]


def _gone(pid: int, within_s: float) -> bool:
    import os
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_a_script_exits_while_its_reward_worker_hangs(tmp_path: Path) -> None:
    import subprocess

    command = _script(tmp_path, "time.sleep(1); print('leaving')")
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    worker, leaving = done.stdout.split()
    assert leaving == "leaving" and _gone(int(worker), 5)


@pytest.mark.parametrize("hang", ["hang", "spin"])
def test_a_reward_worker_dies_with_its_killed_parent(tmp_path: Path, hang: str) -> None:
    # "spin" holds the worker's GIL: only the kernel's parent-death signal can end it.
    import subprocess

    with subprocess.Popen(
        _script(tmp_path, "time.sleep(1); print('hung', flush=True); time.sleep(600)", hang),
        stdout=subprocess.PIPE,
        text=True,
    ) as parent:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        assert parent.stdout.readline() == "hung\n"
        parent.kill()
    assert _gone(worker, 5)


async def test_a_cancelled_call_kills_its_worker_and_frees_its_place(tmp_path: Path) -> None:
    import anyio

    path = tmp_path / "where.py"
    path.write_text(_WHERE)
    function = load_reward_func(path, processes=1)
    started = anyio.current_time()
    with anyio.move_on_after(1.0) as scope:  # as an episode's step timeout does
        await function.ascore(["q"], ["p"], ["hang"])
    assert scope.cancelled_caught and anyio.current_time() - started < 5
    with anyio.fail_after(30):  # the only worker's place is free again
        assert (await function.ascore(["q"], ["p"], [""])).rewards == [1.0]


def test_a_cancel_that_comes_after_its_call_ended_leaves_the_worker_alone(tmp_path: Path) -> None:
    # The race of an episode's step timeout with the answer: by the time the cancel lands,
    # the worker may be serving another call.
    from agenthub.envs.reward_func._function import _Call

    path = tmp_path / "where.py"
    path.write_text(_WHERE)
    function = load_reward_func(path, processes=1)
    late = _Call()
    first = function._score(["q"], ["p"], [""], None, late).extra_logs["pid"]
    late.cancel()
    assert function(["q"], ["p"], [""]).extra_logs["pid"] == first


def test_workers_import_what_the_caller_can_and_one_that_cannot_is_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "shared_helper.py").write_text("BONUS = 0.5\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    path = tmp_path / "uses_helper.py"
    path.write_text(
        "import shared_helper\n\ndef reward_func(q, p, l):\n    return [shared_helper.BONUS]\n"
    )
    assert load_reward_func(path, processes=1)(["q"], ["p"], [""]).rewards == [0.5]
    broken = tmp_path / "only_here.py"
    broken.write_text(
        "import sys\nif sys.argv[0].endswith('_worker.py'):\n"
        "    raise ImportError('not in a worker')\n"
        "def reward_func(q, p, l):\n    return [1.0]\n"
    )
    function = load_reward_func(broken, processes=1)
    for _ in range(3):
        with pytest.raises(
            RewardFuncError,
            match="could not import the file: .*raised ImportError: not in a worker$",
        ):
            function(["q"], ["p"], [""])


def test_a_file_changed_during_a_run_leaves_the_older_version_s_calls_alone(
    tmp_path: Path,
) -> None:
    import os

    path = tmp_path / "where.py"
    path.write_text(_WHERE)
    older = load_reward_func(path, processes=1)
    os.utime(path, ns=(1, 10**18))
    newer = load_reward_func(path, processes=1)
    pids = [f(["q"], ["p"], [""]).extra_logs["pid"][0] for f in (older, newer, older, newer)]
    assert pids[0] == pids[2] and pids[1] == pids[3] and pids[0] != pids[1]


def test_an_async_reward_function_is_refused_when_loaded(tmp_path: Path) -> None:
    path = tmp_path / "r.py"
    path.write_text("async def reward_func(queries, prompts, labels):\n    return [1.0]\n")
    with pytest.raises(RewardFuncError, match="is `async def`; OpenRLHF's reward_func is a plain"):
        make("reward_func", reward_func=str(path))


def test_reward_processes_are_checked(fixtures: Path) -> None:
    with pytest.raises(ValueError, match="reward_processes=2 needs a reward file"):
        make("reward_func", reward_func=lambda q, p, l: [1.0], reward_processes=2)
    with pytest.raises(ValueError, match="reward_processes is for a reward file"):
        make("reward_func", remote_rm_url="http://rm:5000/get_reward", reward_processes=2)
    with pytest.raises(RewardFuncError, match="processes=-1: give 0"):
        make("reward_func", reward_func=str(fixtures / "reward_plain.py"), reward_processes=-1)
