from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path

import anyio
import pytest

import agenthub
from agenthub import Task
from agenthub.agents import (
    ChatTokenizer,
    EngineError,
    EpisodeRunner,
    FakeEngine,
    Generation,
    RolloutConfig,
    SamplingParams,
    Timeouts,
    Timings,
    Trajectory,
)
from tests.unit.agents._envs import TrackedEnv

pytestmark = pytest.mark.anyio
ENV = "agents-test-tracked"


@pytest.fixture(autouse=True)
def tracked_env() -> Iterator[None]:
    agenthub.register(ENV, "tests.unit.agents._envs:TrackedEnv", override=True)
    TrackedEnv.reset_counters()
    yield
    assert not TrackedEnv.live, "an env was left open"


def replying(chat: ChatTokenizer, text: str = "3", *, end: bool = True) -> FakeEngine:
    ids = chat.encode_text(text) + ([chat.closing_ids[0]] if end else [])
    return FakeEngine(lambda prompt: ids, stop_token_ids=chat.stop_token_ids)


def task(i: int = 0, label: int = 2, **metadata: float | int | bool) -> Task:
    return Task(id=f"task-{i}", prompt="Count down with me.", label=label, metadata=metadata)


def runner(engine: FakeEngine, chat: ChatTokenizer, **config: object) -> EpisodeRunner:
    return EpisodeRunner(engine, chat, ENV, RolloutConfig(**config))  # type: ignore[arg-type]


def model_spans(t: Trajectory) -> list[tuple[list[int], list[float]]]:
    spans: list[tuple[list[int], list[float]]] = []
    previous = 0
    for i, m in enumerate(t.loss_mask):
        if m and not previous:
            spans.append(([], []))
        if m:
            spans[-1][0].append(t.tokens[i])
            spans[-1][1].append(t.logprobs[i])
        previous = m
    return spans


async def test_multi_turn_episode_keeps_exactly_the_engine_tokens(chat: ChatTokenizer) -> None:
    engine = replying(chat)
    engine.set_policy_version(5)
    [t] = await runner(engine, chat).collect([task(label=3)])
    assert t.terminated and not t.truncated and t.error is None
    assert t.num_turns == 3 and t.step_rewards == [0.0, 0.0, 1.0] and t.reward == 1.0
    assert t.score == 1.0 and t.extra_logs == {"turn": 3.0}
    spans = model_spans(t)
    assert [(list(g.token_ids), list(g.logprobs)) for g in engine.generations] == spans
    assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.loss_mask, strict=False) if not m)
    assert set(t.policy_versions) == {5}
    # Every request was the trajectory so far, token for token.
    for request in engine.requests:
        assert list(request) == t.tokens[: len(request)]
    assert Trajectory.model_validate_json(t.model_dump_json()) == t
    assert set(json.loads(t.model_dump_json())) == {
        "env", "task_id", "sample", "tokens", "loss_mask", "logprobs", "policy_versions",
        "step_rewards", "reward", "score", "terminated", "truncated", "num_turns", "error",
        "timings", "extra_logs", "finish_reasons",
    }  # fmt: skip
    assert t.finish_reasons == ["stop", "stop", "stop"]


async def test_turn_budget_truncates(chat: ChatTokenizer) -> None:
    [t] = await runner(replying(chat), chat, max_turns=2).collect([task(label=9)])
    assert t.truncated and not t.terminated and t.num_turns == 2


async def test_a_wrapped_env_s_spec_runs_its_episodes_wrapped(chat: ChatTokenizer) -> None:
    # Each episode makes its env from the spec, which held the inner env only: the turn
    # limit a user wrapped the env in was silently dropped.
    from agenthub.wrappers import TurnLimit

    limited = TurnLimit(agenthub.make(ENV), max_turns=2)
    spec = limited.spec
    await limited.aclose()
    assert spec is not None
    engine = replying(chat)
    [t] = await EpisodeRunner(engine, chat, spec, RolloutConfig()).collect([task(label=9)])
    assert t.truncated and not t.terminated and t.num_turns == len(engine.requests) == 2


async def test_token_budget_truncates_and_bounds_the_sequence(chat: ChatTokenizer) -> None:
    engine = replying(chat, "Hello, world! " * 10, end=False)
    [t] = await runner(engine, chat, max_tokens=60).collect([task(label=9)])
    assert t.truncated and len(t.tokens) <= 60
    assert engine.generations[-1].finish_reason == "length"
    # Each reply's finish reason is kept: the last was cut at the room left under max_tokens.
    assert t.finish_reasons == [g.finish_reason for g in engine.generations]
    assert t.finish_reasons[-1] == "length"


async def test_context_limit_truncates(chat: ChatTokenizer) -> None:
    engine = replying(chat, "Hello, world! " * 10, end=False)
    engine._max_model_len = 70
    [t] = await runner(engine, chat).collect([task(label=9)])
    assert t.truncated and len(t.tokens) <= 70


async def test_env_failures_are_typed_errors_and_siblings_finish(chat: ChatTokenizer) -> None:
    tasks = [
        task(0, fail_at=2),
        task(1, step_delay_s=5.0),
        task(2, score_error=True),
        task(3),
        task(4, close_error=True),
    ]
    timeouts = Timeouts(env_step_s=0.5)
    out = await runner(replying(chat), chat, timeouts=timeouts).collect(tasks)
    by_id = {t.task_id: t for t in out}
    assert by_id["task-0"].error is not None and by_id["task-0"].error.cause == "env_error"
    assert "broken at turn 2 (raised at " in by_id["task-0"].error.message
    assert (
        "_envs.py:" in by_id["task-0"].error.message
        and ", in step)" in by_id["task-0"].error.message
    )
    assert by_id["task-0"].num_turns == 2 and not by_id["task-0"].terminated
    assert by_id["task-1"].error is not None and by_id["task-1"].error.cause == "env_timeout"
    assert by_id["task-2"].error is not None and by_id["task-2"].error.cause == "score_error"
    assert by_id["task-3"].error is None and by_id["task-3"].terminated
    assert by_id["task-4"].error is not None and by_id["task-4"].error.cause == "env_error"
    assert "aclose: OSError" in by_id["task-4"].error.message


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        ("reset_obs_only", "reset must return (observation, info), got list"),
        ("step_tuple", "step must return agenthub.Step(observation, reward, terminated, "),
        ("step_dicts", "observation that is a list of dict"),
        ("step_int_flag", "Step.terminated must be a bool, got 1"),
    ],
)
async def test_an_env_returning_the_wrong_type_fails_only_its_episode(
    chat: ChatTokenizer, wrong: str, message: str
) -> None:
    out = await runner(replying(chat), chat).collect(
        [task(0, label=1, wrong_return=wrong), task(1)]
    )
    by_id = {t.task_id: t for t in out}
    error = by_id["task-0"].error
    assert error is not None and error.cause == "env_error" and message in error.message, error
    assert by_id["task-1"].error is None and by_id["task-1"].terminated


async def test_a_message_the_chat_template_cannot_render_fails_only_its_episode(
    chat: ChatTokenizer,
) -> None:
    template = chat.tokenizer.chat_template
    refusing = copy.copy(chat.tokenizer)
    refusing.chat_template = (
        "{% for m in messages %}{% if m.role == 'tool' %}"
        "{{ raise_exception('tool role is not supported') }}{% endif %}{% endfor %}" + template
    )
    refusing_chat = ChatTokenizer(refusing)
    out = await runner(replying(refusing_chat), refusing_chat).collect(
        [task(0, label=2, role="tool"), task(1, label=2)]
    )
    by_id = {t.task_id: t for t in out}
    error = by_id["task-0"].error
    assert error is not None and error.cause == "env_error", error
    assert "step: its observation cannot be tokenized" in error.message
    assert "cannot render messages with roles ['tool']" in error.message
    assert "tool role is not supported" in error.message
    assert by_id["task-1"].error is None and by_id["task-1"].terminated


async def test_an_env_that_blocks_the_loop_is_named_in_a_warning(
    chat: ChatTokenizer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from agenthub import _watchdog
    from agenthub.agents import _runner

    monkeypatch.setattr(_runner, "loop_watchdog", partial(_watchdog.loop_watchdog, after_s=0.5))
    with caplog.at_level(logging.WARNING, logger="agenthub.agents"):
        [t] = await runner(replying(chat), chat).collect([task(label=1, step_block_s=1.5)])
    assert t.error is None and t.terminated
    stalled = caplog.records[0].getMessage()
    assert stalled.startswith("the event loop has not run for ")
    assert "_envs.py:" in stalled and "in step (time.sleep(" in stalled, stalled
    assert "anyio.to_thread.run_sync" in stalled


class FailingEngine(FakeEngine):
    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        raise EngineError("server answered 500")


async def test_engine_failure_and_timeout_are_recorded(chat: ChatTokenizer) -> None:
    failing = FailingEngine(lambda p: [1])
    [t] = await runner(failing, chat).collect([task()])
    assert t.error is not None and t.error.cause == "generation_error"
    slow = replying(chat)
    slow.latency_s = 5.0
    [t] = await runner(slow, chat, timeouts=Timeouts(generate_s=0.2)).collect([task()])
    assert t.error is not None and t.error.cause == "generation_timeout"


async def test_concurrency_limit_and_one_env_per_episode(chat: ChatTokenizer) -> None:
    tasks = [task(i, label=2, step_delay_s=0.02) for i in range(12)]
    out = await runner(replying(chat), chat, concurrency=3).collect(tasks)
    assert len(out) == 12 and all(t.terminated for t in out)
    assert TrackedEnv.max_in_flight == 3
    assert TrackedEnv.made == 12


async def test_groups_of_samples_per_prompt(chat: ChatTokenizer) -> None:
    groups: list[list[Trajectory]] = []

    async def keep(group: list[Trajectory]) -> None:
        groups.append(group)

    r = runner(replying(chat), chat, n_samples_per_prompt=4, concurrency=5)
    await r.run([task(i) for i in range(3)], on_group=keep)
    assert sorted(len(g) for g in groups) == [4, 4, 4]
    assert all(len({t.task_id for t in g}) == 1 for g in groups)
    await r.run([(task(9), 2)], on_group=keep)
    assert len(groups[-1]) == 2


async def test_cancellation_leaves_no_env_open(chat: ChatTokenizer) -> None:
    tasks = [task(i, label=5, step_delay_s=0.05) for i in range(20)]
    with anyio.move_on_after(0.3):
        await runner(replying(chat), chat, concurrency=8).collect(tasks)
    assert TrackedEnv.made > 0
    # the autouse fixture checks that every env that was made is closed


async def test_scorer_adds_reward_and_its_failures_are_typed(chat: ChatTokenizer) -> None:
    async def bonus(task: Task, trajectory: Trajectory) -> float:
        return 0.5

    async def broken(task: Task, trajectory: Trajectory) -> float:
        raise RuntimeError("judge said nonsense")

    async def slow(task: Task, trajectory: Trajectory) -> float:
        await anyio.sleep(5)
        return 0.0

    config = RolloutConfig(timeouts=Timeouts(score_s=0.2))
    engine = replying(chat)
    [t] = await EpisodeRunner(engine, chat, ENV, config, scorer=bonus).collect([task()])
    assert t.reward == 1.5 and t.step_rewards == [0.0, 1.5] and t.terminated
    [t] = await EpisodeRunner(engine, chat, ENV, config, scorer=broken).collect([task()])
    assert t.error is not None and t.error.cause == "score_error" and not t.terminated
    [t] = await EpisodeRunner(engine, chat, ENV, config, scorer=slow).collect([task()])
    assert t.error is not None and t.error.cause == "score_timeout"


async def test_sampling_seed_differs_per_sample_and_turn(chat: ChatTokenizer) -> None:
    seen: list[int | None] = []

    class SeedEngine(FakeEngine):
        async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
            seen.append(sampling.seed)
            return await super().generate(prompt_ids, sampling)

    ids = [*chat.encode_text("3"), chat.closing_ids[0]]
    engine = SeedEngine(lambda p: ids, stop_token_ids=chat.stop_token_ids)
    config = RolloutConfig(sampling=SamplingParams(seed=1), n_samples_per_prompt=2)
    await EpisodeRunner(engine, chat, ENV, config).collect([task(label=2)])
    assert len(seen) == 4 and len(set(seen)) == 4


async def test_a_judge_that_cannot_judge_is_a_typed_error_on_that_episode_only(
    chat: ChatTokenizer,
) -> None:
    import socket

    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        judge_url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
        runner = EpisodeRunner(
            replying(chat, "an answer"),
            chat,
            "judge",
            RolloutConfig(),
            env_kwargs={"judge_url": judge_url, "judge_model": "j", "max_retries": 0},
        )
        failed = await runner.run_episode(Task(id="q", prompt="Say something.", label="x"))
    assert failed.error is not None and failed.error.cause == "env_error"
    assert "JudgeError" in failed.error.message and failed.reward == 0.0
    assert 1 in failed.loss_mask, "what the model said is kept for inspection"


async def test_without_max_turns_the_env_decides_when_its_episode_ends(
    chat: ChatTokenizer,
) -> None:
    [t] = await runner(replying(chat), chat).collect([task(label=12)])
    assert (t.num_turns, t.terminated, t.truncated) == (12, True, False)


async def test_a_tool_env_episode_shows_the_tools_and_runs_the_calls(
    chat: ChatTokenizer, tool_chat: ChatTokenizer
) -> None:
    agenthub.register("agents-test-calculator", "tests.unit._tool_envs:Calculator", override=True)
    replies = iter(
        [
            '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
            '<tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call>',
            "It is 5.",
        ]
    )
    engine = FakeEngine(
        lambda prompt: [*tool_chat.encode_text(next(replies)), tool_chat.closing_ids[0]],
        stop_token_ids=tool_chat.stop_token_ids,
    )
    calculator = EpisodeRunner(engine, tool_chat, "agents-test-calculator", RolloutConfig())
    [t] = await calculator.collect([Task(id="sum", prompt="What is 2 + 3?", label=5)])
    assert t.error is None and t.terminated and t.num_turns == 3 and t.reward == 1.0
    text = tool_chat.tokenizer.decode(t.tokens)
    assert text.index('{"name": "add", "description": "Add two integers."') < text.index("2 + 3")
    assert "<|im_start|>tool\n5<|im_end|>" in text
    assert "<|im_start|>tool\nerror: bad arguments for add: b: Field required" in text
    # The same episode with a template that cannot show tools fails, saying so.
    blind = EpisodeRunner(replying(chat), chat, "agents-test-calculator", RolloutConfig())
    [t] = await blind.collect([Task(id="sum", prompt="What is 2 + 3?", label=5)])
    assert t.error is not None and t.error.cause == "env_error"
    assert "does not show the model the tools ['add', 'multiply', 'divide']" in t.error.message


async def test_an_env_whose_tools_are_not_schemas_fails_only_its_episode(
    chat: ChatTokenizer,
) -> None:
    agenthub.register("agents-test-bad-tools", "tests.unit._tool_envs:BadTools", override=True)
    bad = EpisodeRunner(replying(chat), chat, "agents-test-bad-tools", RolloutConfig())
    [t] = await bad.collect([Task(id="t", prompt="x")])
    assert t.error is not None and t.error.cause == "env_error"
    assert t.error.message.startswith("tools: BadTools.tools[0] must be a dict")


async def test_an_env_calling_sys_exit_fails_only_its_episode(chat: ChatTokenizer) -> None:
    out = await runner(replying(chat), chat).collect([task(0, exit_at=1), task(1, label=1)])
    by_id = {t.task_id: t for t in out}
    error = by_id["task-0"].error
    assert error is not None and error.cause == "env_error"
    assert error.message.startswith("step: SystemExit: sys.exit at turn 1 (raised at ")
    assert by_id["task-1"].error is None and by_id["task-1"].terminated


async def test_a_reward_function_gets_the_sequence_as_the_model_saw_it(
    chat: ChatTokenizer,
) -> None:
    """As in OpenRLHF: prompts templated, queries the whole decoded sequence, special tokens
    and all, so a reward file that splits on the template's markers works unmodified."""
    seen: list[tuple[list[str], list[str], list[object]]] = []

    def reward_func(queries: list[str], prompts: list[str], labels: list[object]) -> list[float]:
        seen.append((queries, prompts, labels))
        return [
            1.0 if q.split("<|im_start|>assistant\n")[-1] == "3<|im_end|>" else 0.0 for q in queries
        ]

    scored = EpisodeRunner(
        replying(chat),
        chat,
        "reward_func",
        RolloutConfig(),
        env_kwargs={"reward_func": reward_func},
    )
    [t] = await scored.collect([Task(id="t", prompt="Count down with me.", label=3)])
    assert t.error is None and t.reward == 1.0
    [(queries, prompts, labels)] = seen
    assert queries == [chat.tokenizer.decode(t.tokens, skip_special_tokens=False)]
    assert prompts == [
        chat.render(
            Task(id="t", prompt="Count down with me.").messages(), add_generation_prompt=True
        )
    ]
    assert queries[0] == prompts[0] + "3<|im_end|>" and labels == [3]


async def test_an_env_sees_the_transcript_only_while_a_runner_steps_it(
    chat: ChatTokenizer,
) -> None:
    """`agenthub.transcript()` at each step: the tokens so far, where the prompt ends and
    why the reply ended; `None` outside."""
    assert agenthub.transcript() is None
    engine = FakeEngine(
        lambda prompt: chat.encode_text("go on"), stop_token_ids=chat.stop_token_ids
    )
    watched = runner(engine, chat, sampling=SamplingParams(max_tokens=2))
    [t] = await watched.collect([task(label=2)])
    assert t.error is None and t.num_turns == 2 and agenthub.transcript() is None
    first, second = TrackedEnv.transcripts
    assert first.finish_reason == second.finish_reason == "length"
    assert first.prompt_length == second.prompt_length == t.loss_mask.index(1)
    assert list(second.tokens) == t.tokens and list(first.tokens) == t.tokens[: len(first.tokens)]
    assert first.text() == chat.decode_all(first.tokens)
    assert first.prompt_text().endswith("<|im_start|>assistant\n")


async def test_an_env_s_stop_strings_end_the_reply_at_the_token_that_completes_one(
    chat: ChatTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    reply = [*chat.encode_text("look up <search>tides</search> then answer"), chat.closing_ids[0]]
    engine = FakeEngine(lambda p: reply, stop_token_ids=chat.stop_token_ids, decode=chat.decode)
    monkeypatch.setattr(TrackedEnv, "stop", ("</search>",))
    [t] = await runner(engine, chat).collect([task(label=2)])
    assert t.error is None and t.num_turns == 2
    # Ended by the string: the tokens as sampled, up to the one that completes it.
    cut = next(i for i in range(1, len(reply)) if "</search>" in chat.decode(reply[:i]))
    assert [list(g.token_ids) for g in engine.generations] == [reply[:cut]] * 2
    assert [g.finish_reason for g in engine.generations] == ["stop", "stop"]
    assert TrackedEnv.actions == [chat.decode(reply[:cut])] * 2
    assert TrackedEnv.actions[0].endswith("</search>")
    assert [tr.finish_reason for tr in TrackedEnv.transcripts if tr] == ["stop", "stop"]
    # The turn is closed by the template's closing tokens before the env's answer.
    first_reply_end = t.loss_mask.index(1) + cut
    assert t.tokens[first_reply_end] == chat.closing_ids[0]
    assert [s for s, _ in model_spans(t)] == [reply[:cut]] * 2

    # The run's own stop strings apply too, the first one written ending the reply.
    engine.generations.clear()
    both = runner(engine, chat, sampling=SamplingParams(stop=("tides",)))
    [t] = await both.collect([task(label=1)])
    assert chat.decode(engine.generations[0].token_ids).endswith("tides")


async def test_an_env_whose_stop_is_not_a_list_of_strings_fails_its_episode(
    chat: ChatTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TrackedEnv, "stop", "</search>")
    [t] = await runner(replying(chat), chat).collect([task()])
    assert t.error is not None and t.error.cause == "env_error"
    assert "stop: TrackedEnv.stop must be a list of strings, got '</search>'" in t.error.message


async def test_an_env_s_system_prompt_opens_its_episodes_and_a_wrong_one_fails_them(
    chat: ChatTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TrackedEnv, "system_prompt", "Answer with one number.")
    [t] = await runner(replying(chat), chat).collect([task(label=1)])
    assert t.error is None
    opening = chat.decode_all(t.tokens[: t.loss_mask.index(1)])
    assert opening.startswith("<|im_start|>system\nAnswer with one number.<|im_end|>")
    monkeypatch.setattr(TrackedEnv, "system_prompt", ["Answer with one number."])
    [t] = await runner(replying(chat), chat).collect([task()])
    assert t.error is not None and t.error.cause == "env_error"
    assert "system_prompt: TrackedEnv.system_prompt must be text or None" in t.error.message


def test_sampling_params_refuse_a_bare_or_empty_stop_string() -> None:
    with pytest.raises(ValueError, match="stop must be a tuple of non-empty strings"):
        SamplingParams(stop="</a>")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stop must be a tuple of non-empty strings"):
        SamplingParams(stop=("",))
    run = SamplingParams(stop=("</a>",))
    assert run.with_stop(("</b>", "</a>")).stop == ("</a>", "</b>")
    assert run.with_stop(()) is run and run.with_stop(["</a>"]) is run


async def test_a_tool_env_does_not_score_a_reply_cut_off_by_the_token_limit(
    tool_chat: ChatTokenizer,
) -> None:
    agenthub.register("agents-test-calculator", "tests.unit._tool_envs:Calculator", override=True)
    text = "It is 5, because two and three make five."
    answer = [*tool_chat.encode_text(text), tool_chat.closing_ids[0]]
    engine = FakeEngine(lambda prompt: answer, stop_token_ids=tool_chat.stop_token_ids)
    config = RolloutConfig(sampling=SamplingParams(max_tokens=len(answer) - 2))
    cut = EpisodeRunner(engine, tool_chat, "agents-test-calculator", config)
    [t] = await cut.collect([Task(id="sum", prompt="What is 2 + 3?", label=5)])
    assert t.error is None and (t.terminated, t.truncated, t.reward) == (False, True, 0.0)
    # The same reply, finished, is an answer.
    whole = EpisodeRunner(engine, tool_chat, "agents-test-calculator", RolloutConfig())
    [t] = await whole.collect([Task(id="sum", prompt="What is 2 + 3?", label=5)])
    assert (t.terminated, t.reward) == (True, 1.0)


async def test_an_agent_file_reads_the_transcript_on_its_own_event_loop(
    chat: ChatTokenizer, fixtures: Path
) -> None:
    agent = {"agent_func": str(fixtures / "agent_func_transcript.py")}
    played = EpisodeRunner(
        replying(chat), chat, "openrlhf_agent", RolloutConfig(), env_kwargs=agent
    )
    [t] = await played.collect([Task(id="t", prompt="Count down with me.")])
    assert t.error is None and t.extra_logs == {"templated": 1.0}


async def test_a_reward_file_s_error_is_recorded_with_the_file_s_line(
    chat: ChatTokenizer, fixtures: Path
) -> None:
    path = fixtures / "reward_broken.py"
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "KeyError" in text)
    run = EpisodeRunner(
        replying(chat), chat, "reward_func", RolloutConfig(), env_kwargs={"reward_func": str(path)}
    )
    [t] = await run.collect([Task(id="case", prompt="Go.", label="raise")])
    assert t.error is not None and t.error.cause == "score_error"
    assert t.error.message.endswith(f" (raised at {path}:{line}, in reward_func)")


async def test_slots_left_by_a_group_s_fast_episodes_go_to_the_next_groups(
    chat: ChatTokenizer,
) -> None:
    """A group keeps its place until its slowest episode ends; meanwhile the slots its fast
    episodes left are filled from groups waiting behind it, until every slot plays."""
    release, four_slow = anyio.Event(), anyio.Event()
    playing = slow = 0

    class OneSlowPerGroup(EpisodeRunner):
        async def run_episode(self, task: Task, *, sample: int = 0) -> Trajectory:
            nonlocal playing, slow
            playing += 1
            try:
                if sample == 0:  # each group's slowest
                    slow += 1
                    if slow == 4:
                        four_slow.set()
                    await release.wait()
                else:
                    await anyio.sleep(0.001)
            finally:
                playing -= 1
            return Trajectory(
                env=ENV, task_id=task.id, sample=sample, tokens=[1], loss_mask=[0],
                logprobs=[0.0], policy_versions=[0], step_rewards=[0.0], reward=0.0,
                terminated=True, truncated=False, num_turns=1, timings=Timings(),
            )  # fmt: skip

    r = OneSlowPerGroup(
        replying(chat), chat, ENV, RolloutConfig(n_samples_per_prompt=2, concurrency=4)
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(r.run, (task(i) for i in range(100)))
        with anyio.fail_after(20):  # else the slots left were not filled from later groups
            await four_slow.wait()
        assert playing == 4, "the slow episodes of 4 groups fill the 4 slots"
        tg.cancel_scope.cancel()
