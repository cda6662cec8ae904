"""`agenthub.evaluate`: one definition of held-out reward for eval and train, its run directory,
and the rollout config both build."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agenthub
from agenthub import AgentHubError, Task
from agenthub.agents import ChatTokenizer, EvalConfig, FakeEngine, evaluate
from agenthub.agents._engines import rollout_config
from agenthub.agents._run_dir import EvalIdentity, changed_fields, locked

ENV = "eval-test-tracked"


@pytest.fixture
def engine(chat: ChatTokenizer) -> FakeEngine:
    agenthub.register(ENV, "tests.unit.agents._envs:TrackedEnv", override=True)
    ids = [*chat.encode_text("3"), chat.closing_ids[0]]
    return FakeEngine(lambda prompt: ids, stop_token_ids=chat.stop_token_ids)


def task(task_id: str, **metadata: Any) -> Task:
    return Task(id=task_id, prompt="Go.", label=1, metadata=metadata)


def test_an_episode_that_ended_in_an_error_counts_as_zero(
    chat: ChatTokenizer, engine: FakeEngine
) -> None:
    # The trainer's held-out evaluation averaged only the episodes without errors (1.0 here)
    # while agenthub eval counted them as 0 (0.5): the same model got two numbers.
    config = EvalConfig(env=ENV, samples_per_task=2)
    tasks = [task("a"), task("b", fail_at=1)]
    summary = evaluate(config, engine=engine, chat=chat, tasks=tasks)
    assert (summary.episodes, summary.tasks) == (4, 2)
    assert (summary.mean_reward, summary.mean_score) == (0.5, 0.5)
    assert summary.pass_at_k == {"pass@1": 0.5, "pass@2": 0.5}
    assert summary.errors == {"env_error": 2} and summary.num_errors == 2
    assert str(summary.last_error).startswith("env_error: step: ValueError: broken at turn 1")
    assert (summary.policy_version, summary.policy_version_max) == (0, 0)
    # What the trainer's held-out evaluation logs: the same number.
    from agenthub.trainer._evaluation import held_out_reward

    assert held_out_reward(summary) == 0.5
    assert agenthub.evaluate is evaluate and agenthub.EvalConfig is EvalConfig


def test_a_run_directory_plays_only_what_is_missing_and_refuses_another_run(
    tmp_path: Path, chat: ChatTokenizer, engine: FakeEngine
) -> None:
    config = EvalConfig(env=ENV, samples_per_task=2)
    first = evaluate(config, out=tmp_path, engine=engine, chat=chat, tasks=[task("a")])
    assert first.episodes == 2 and len(engine.requests) == 2
    both = evaluate(config, out=tmp_path, engine=engine, chat=chat, tasks=[task("a"), task("c")])
    assert both.episodes == 4 and len(engine.requests) == 4, "a's two episodes were kept"
    assert (tmp_path / "summary.json").read_text() == both.model_dump_json(indent=2) + "\n"
    hotter = config.model_copy(update={"temperature": 0.5})
    with pytest.raises(AgentHubError, match="holds an eval run with different temperature;"):
        evaluate(hotter, out=tmp_path, engine=engine, chat=chat, tasks=[task("a")])


def test_a_run_directory_is_held_by_one_run_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with locked(out, command="eval"):
        with (
            pytest.raises(AgentHubError, match="in use by another agenthub eval run; wait"),
            locked(out, command="eval"),
        ):
            pass
        assert out.is_dir()
    assert not out.exists(), "a run that wrote nothing leaves nothing"


def test_an_identity_is_compared_on_what_the_earlier_run_recorded() -> None:
    now = EvalIdentity(env="e", model="default", stop=("</a>",))
    # Written before `model` and `stop` were recorded: `model` is not compared; `stop` is,
    # as what such runs did (none).
    older = EvalIdentity.model_validate({"env": "e"})
    assert changed_fields(older, now, assumed=EvalIdentity.ASSUMED) == ["stop"]
    assert changed_fields(now, now, assumed=EvalIdentity.ASSUMED) == []


def test_training_rollouts_and_evaluation_sample_alike_from_the_same_settings() -> None:
    from agenthub.trainer._config import TrainConfig

    rollout = {"max_reply_tokens": 64, "temperature": 0.7, "top_p": 0.9, "stop": ["</a>"]}
    rollout |= {"max_turns": 3, "max_tokens": 900, "chat_template": False}
    rollout |= {"generate_timeout_s": 20.0, "env_step_timeout_s": 30.0}
    trained = TrainConfig.model_validate({"env": "math", "rollout": rollout}).rollout
    evaluated = EvalConfig(env="math", seed=4, concurrency=5, samples_per_task=3, **rollout)
    assert evaluated.rollout() == rollout_config(
        trained, samples=3, concurrency=5, seed=4, sampling_seed=4
    )
