import json
from pathlib import Path
from typing import Any

import pytest

from agenthub import (
    Env,
    EnvArgumentsError,
    EnvBuildError,
    EnvSpec,
    PluginLoadError,
    Task,
    make,
    register,
)
from agenthub.wrappers import Recorder, TurnLimit, Wrapper

from ._envs import CountdownEnv

pytestmark = pytest.mark.anyio

TASK = Task(id="t", prompt="go", label=3)


async def test_turn_limit_truncates_without_terminating() -> None:
    env = TurnLimit(CountdownEnv(), max_turns=2)
    await env.reset(TASK, seed=1)
    first = await env.step("a")
    second = await env.step("b")
    assert not first.done
    assert (second.terminated, second.truncated) == (False, True)
    assert second.info["truncated_by"] == "turn_limit"
    await env.reset(TASK, seed=1)
    assert not (await env.step("a")).done, "reset must restart the turn count"


async def test_turn_limit_keeps_natural_termination() -> None:
    env = TurnLimit(CountdownEnv(), max_turns=3)
    await env.reset(TASK)
    steps = [await env.step("x") for _ in range(3)]
    assert (steps[-1].terminated, steps[-1].truncated) == (True, False)


def test_turn_limit_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        TurnLimit(CountdownEnv(), max_turns=0)


async def test_recorder_keeps_episodes_and_writes_json_lines(tmp_path: Path) -> None:
    inner = CountdownEnv()
    env = Recorder(TurnLimit(inner, max_turns=10), path=tmp_path / "episodes.jsonl")
    for _ in range(2):
        await env.reset(TASK, seed=0)
        while not (await env.step("next")).done:
            pass
    await env.reset(TASK, seed=0)
    await env.step("half")
    await env.aclose()
    assert inner.closed == 1 and env.unwrapped is inner
    assert [len(e.steps) for e in env.episodes] == [3, 3, 1]
    assert env.episodes[0].episode_return == 1.0
    lines = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert len(lines) == 3, "a half-finished episode is written when the env closes"
    assert lines[0]["task"]["id"] == "t"
    assert lines[0]["steps"][-1]["terminated"] is True
    assert lines[0]["steps"][0]["observation"][0]["role"] == "user"


def test_wrappers_pass_what_the_runner_reads_after_reset_through() -> None:
    class Ruled(CountdownEnv):
        tools = ({"type": "function", "function": {"name": "f", "parameters": {}}},)
        stop = ("</search>",)
        system_prompt = "Count down."

    inner = Ruled()
    wrapped = TurnLimit(Recorder(inner), 3)
    assert (wrapped.tools, wrapped.stop, wrapped.system_prompt) == (
        Ruled.tools,
        ("</search>",),
        "Count down.",
    )
    wrapped.stop, wrapped.system_prompt = ("Observation:",), None  # as a reset may set them
    assert (inner.stop, inner.system_prompt) == (("Observation:",), None)


def test_a_wrapped_env_s_spec_builds_the_same_wrapped_env_again(tmp_path: Path) -> None:
    # The spec was the inner env's: make(env.spec) in a worker or an EpisodeRunner silently
    # dropped the turn limit.
    register("countdown-wrapped", "tests.unit._envs:CountdownEnv", override=True, delay_s=0.0)
    path = str(tmp_path / "e.jsonl")
    wrapped = Recorder(TurnLimit(make("countdown-wrapped"), 2), path=path)
    spec = wrapped.spec
    assert spec is not None and [(w.entry_point, w.kwargs) for w in spec.wrappers] == [
        ("agenthub.wrappers._turn_limit:TurnLimit", {"max_turns": 2}),
        ("agenthub.wrappers._recorder:Recorder", {"path": path}),
    ]
    again = make(EnvSpec.model_validate_json(spec.model_dump_json()))
    assert isinstance(again, Recorder) and isinstance(again.env, TurnLimit)
    assert again.env.max_turns == 2 and again.path == tmp_path / "e.jsonl"
    assert again.spec == spec and again.unwrapped.spec == make("countdown-wrapped").spec


class ThreeTurns(TurnLimit[Any]):
    """A wrapper of fixed settings, built on another: its spec records what it takes."""

    def __init__(self, env: Env[Any], *, note: str = "") -> None:
        super().__init__(env, 3)


def test_a_wrapper_s_spec_records_its_own_arguments_not_those_it_passes_on() -> None:
    register("countdown-three", "tests.unit._envs:CountdownEnv", override=True)
    spec = ThreeTurns(make("countdown-three"), note="x").spec
    assert spec is not None and spec.wrappers[0].kwargs == {"note": "x"}
    again = make(spec)
    assert isinstance(again, ThreeTurns) and again.max_turns == 3 and again.spec == spec


def test_an_env_a_factory_returns_wrapped_is_not_wrapped_twice_when_made_again() -> None:
    register("countdown-limited", "tests.unit._envs:turn_limited_countdown", override=True)
    env = make("countdown-limited")
    assert env.spec is not None and env.spec.wrappers == ()
    again = make(env.spec)
    assert isinstance(again, TurnLimit) and not isinstance(again.env, TurnLimit)


class Scaled(Wrapper[Any]):
    """Multiplies rewards by `factor`, or by what `scale` says."""

    def __init__(self, env: Env[Any], factor: float = 1.0, scale: Any = None) -> None:
        super().__init__(env)
        self.factor, self.scale = factor, scale


def test_a_wrapper_that_cannot_be_built_again_says_so_when_made() -> None:
    register("countdown-plain", "tests.unit._envs:CountdownEnv", override=True)
    spec = Scaled(make("countdown-plain"), scale=lambda r: r * 2).spec
    assert spec is not None and spec.wrappers[0].kwargs is None
    with pytest.raises(
        EnvBuildError,
        match=r"wrapped in tests\.unit\.test_wrappers:Scaled, which was built with arguments "
        "that are not JSON",
    ):
        make(spec)
    local = Scaled(make("countdown-plain"), factor=2.0).spec
    assert local is not None and local.wrappers[0].kwargs == {"factor": 2.0}
    moved = local.wrappers[0].model_copy(update={"entry_point": "tests.unit.test_wrappers:Gone"})
    with pytest.raises(PluginLoadError, match="Gone, which failed to load: AttributeError"):
        make(local.model_copy(update={"wrappers": (moved,)}))
    wrong = local.wrappers[0].model_copy(update={"kwargs": {"bogus": 1}})
    with pytest.raises(EnvArgumentsError, match="could not be built with {'bogus': 1}"):
        make(local.model_copy(update={"wrappers": (wrong,)}))
