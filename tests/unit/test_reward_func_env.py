from pathlib import Path

import pytest

from agenthub import RewardFuncError, Task, make
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
