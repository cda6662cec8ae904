"""`agenthub repl`'s logic without a terminal: lines in, a rich console buffer out."""

from __future__ import annotations

import asyncio
import copy
import io
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agenthub import AgentHubError, EnvNotFoundError, EnvSpec, Task
from agenthub.agents import (
    ChatTokenizer,
    EpisodeRunner,
    FakeEngine,
    InferenceEngine,
    RolloutConfig,
    SamplingParams,
    Trajectory,
)
from agenthub.agents._fake import fake_logprob
from agenthub.cli import main
from agenthub.repl import Command, EngineFactory, Enter, EntryReader, Repl, TypedAction
from agenthub.repl._input import SETTINGS, completions
from agenthub.repl._terminal import _Loop, run_terminal
from tests.tiny_model import build_tokenizer

pytestmark = pytest.mark.anyio

GUESS = "tests.unit._repl_envs:GuessEnv"
SECRET = 9  # what GuessEnv draws for task 0 (1..10) under seed 0
GUESS_SPEC = EnvSpec(id=GUESS, entry_point=GUESS)


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    out: Path = tmp_path_factory.mktemp("tiny-tokenizer")
    build_tokenizer(out)
    return ChatTokenizer.from_pretrained(out)


class Harness:
    """A `Repl` on an env, its output in a buffer, and a FakeEngine that always says `reply`."""

    def __init__(
        self,
        chat: ChatTokenizer,
        env: str = GUESS,
        reply: str = "5",
        engine_factory: EngineFactory | None = None,
        env_kwargs: dict[str, str] | None = None,
        tasks_file: Path | None = None,
        chat_template: bool = True,
    ) -> None:
        self.buffer = io.StringIO()
        self.reply_ids = [*chat.encode_text(reply), chat.stop_token_ids[0]]
        self.engine = FakeEngine(lambda prompt: self.reply_ids)
        self.engines_built = 0

        async def build() -> InferenceEngine:
            self.engines_built += 1
            return self.engine

        self.repl = Repl(
            env=env,
            env_kwargs=env_kwargs or {},
            tasks_file=str(tasks_file) if tasks_file else None,
            task_index=0,
            seed=0,
            chat=chat,
            sampling=SamplingParams(max_tokens=16),
            console=Console(file=self.buffer, width=200, color_system=None),
            engine_factory=engine_factory or build,
            chat_template=chat_template,
        )

    async def type(self, *lines: str) -> str:
        """Feed lines; return what they printed."""
        start = self.buffer.tell()
        for line in lines:
            assert await self.repl.feed(line)
        return self.buffer.getvalue()[start:]

    @property
    def episode(self):  # type: ignore[no-untyped-def]
        assert self.repl.episode is not None
        return self.repl.episode


async def started(
    chat: ChatTokenizer,
    env: str = GUESS,
    reply: str = "5",
    engine_factory: EngineFactory | None = None,
) -> Harness:
    harness = Harness(chat, env, reply, engine_factory)
    await harness.repl.start()
    return harness


async def on_the_task_file(chat: ChatTokenizer, fixtures: Path, env: str, **files: str) -> Harness:
    """A started REPL on `env` built with fixture files, on the fixtures' task file."""
    kwargs = {key: str(fixtures / name) for key, name in files.items()}
    h = Harness(chat, env=env, env_kwargs=kwargs, tasks_file=fixtures / "tasks.jsonl")
    await h.repl.start()
    return h


async def test_start_shows_the_task_and_first_observation(chat: ChatTokenizer) -> None:
    h = await started(chat)
    out = h.buffer.getvalue()
    assert "task 0: held_out-0" in out and "Guess my number from 1 to 10." in out
    assert "Your first guess?" in out and "reset" in out and '"top": 10' in out
    assert h.repl.prompt.endswith("1> ")
    await h.repl.aclose()


async def test_the_env_s_system_prompt_is_shown_and_opens_the_session(chat: ChatTokenizer) -> None:
    h = await started(chat, "tests.unit._repl_envs:RuledGuessEnv")
    out = h.buffer.getvalue()
    assert "the env's system prompt, placed before the task's:\n[system] Guess with one" in out
    opening = chat.decode_all(h.episode.session.tokens)
    assert opening.startswith("<|im_start|>system\nGuess with one number.<|im_end|>")
    await h.repl.aclose()


async def test_a_typed_action_enters_the_session_with_mask_zero(chat: ChatTokenizer) -> None:
    h = await started(chat)
    before = len(h.episode.session)
    out = await h.type("3", "")
    assert "step 1: reward 0  return 0  terminated False  truncated False" in out
    assert "Higher." in out and '"guesses": 1' in out and "(step " in out
    session = h.episode.session
    typed = [*chat.encode_text("3"), chat.stop_token_ids[0]]
    assert session.tokens[before : before + len(typed)] == typed
    assert session.loss_mask[before:] == [0] * (len(session) - before)
    assert h.episode.kinds[before : before + len(typed)] == ["human"] * len(typed)
    assert h.episode.actions[0].text == "3"
    await h.repl.aclose()


async def test_multi_line_actions_end_with_an_empty_line_or_a_fence(chat: ChatTokenizer) -> None:
    reader = EntryReader()
    assert reader.feed("first") is None and reader.continuing
    assert reader.feed("second") is None
    assert reader.feed("") == TypedAction("first\nsecond")
    assert reader.feed('"""') is None
    for line in ("a", "", "b"):
        assert reader.feed(line) is None
    assert reader.feed('"""') == TypedAction("a\n\nb")
    assert reader.feed('"""') is None and reader.feed('"""') == TypedAction("")
    assert reader.feed(":set temperature 0.7") == Command("set", ("temperature", "0.7"))
    assert reader.feed("") == Enter() and reader.feed(":") == Enter()
    assert reader.feed("half") is None
    reader.cancel()
    assert not reader.continuing


async def test_gen_loads_the_model_once_and_records_sampled_tokens(chat: ChatTokenizer) -> None:
    h = await started(chat, reply="9")
    await h.type("3", "")
    before = len(h.episode.session)
    out = await h.type(":gen")
    assert "loading the model" in out and "model ready" in out
    assert "sampling: temperature 1  top_p 1  top_k -1  max_tokens 16  seed none" in out
    assert "model (" in out and "stop" in out and "terminated True" in out
    session = h.episode.session
    assert session.tokens[before:] == h.reply_ids
    assert session.loss_mask[before:] == [1] * len(h.reply_ids)
    assert session.logprobs[before:] == [
        fake_logprob(t, before + i) for i, t in enumerate(h.reply_ids)
    ]
    assert "the episode is over" in await h.type(":gen")
    assert h.engines_built == 1
    await h.repl.aclose()
    assert h.engine.closed


async def test_gen_ends_the_reply_at_the_env_s_stop_string_and_a_replay_says_so(
    chat: ChatTokenizer, tmp_path: Path
) -> None:
    reply = [*chat.encode_text("1 = 9 or so"), chat.stop_token_ids[0]]
    engine = FakeEngine(lambda prompt: reply, decode=chat.decode)

    async def build() -> InferenceEngine:
        return engine

    h = Harness(chat, "tests.unit._repl_envs:StopAtEqualsEnv", engine_factory=build)
    await h.repl.start()
    await h.type(":gen")
    [generation] = engine.generations
    assert generation.finish_reason == "stop" and chat.decode(generation.token_ids) == "1 ="
    assert [a.text for a in h.episode.actions] == ["1 ="]
    file = tmp_path / "t.jsonl"
    await h.type(f":save {file}", f":load {file}", "")
    [replayed] = h.episode.actions
    assert replayed.text == "1 =" and replayed.generation.finish_reason == "stop"
    await h.repl.aclose()


async def test_a_typed_reply_ending_on_a_stop_string_holds_the_tokens_eval_records(
    chat: ChatTokenizer, tmp_path: Path
) -> None:
    calc = "tests.unit._repl_envs:CalcEnv"

    def reply(prompt: Sequence[int]) -> list[int]:
        text = "32" if "[calc]" in chat.decode(prompt) else "8 * 4 = 32"
        return [*chat.encode_text(text), chat.stop_token_ids[0]]

    engine = FakeEngine(reply, decode=chat.decode)
    config = RolloutConfig(sampling=SamplingParams(max_tokens=16))
    runner = EpisodeRunner(engine, chat, EnvSpec(id=calc, entry_point=calc), config)
    task = Task(id="held_out-0", prompt="Multiply.")
    [evaluated] = await runner.collect([task])
    assert evaluated.error is None and evaluated.reward == 1.0

    h = Harness(chat, calc)
    await h.repl.start()
    await h.type("8 * 4 =", "", "32", "")
    assert h.episode.trajectory().tokens == evaluated.tokens
    assert "|8| *| 4| |=| |[|c|a|l|c|]|" in await h.type(":tokens")
    file = tmp_path / "calc.jsonl"
    await h.type(f":save {file}", f":load {file}")
    assert "matches the saved one token for token" in await h.type("", "")
    assert [a.text for a in h.episode.actions] == ["8 * 4 =", "32"]
    await h.repl.aclose()


def test_where_a_reply_ends_takes_a_few_decodes_however_long_it_is(
    chat: ChatTokenizer,
) -> None:
    # Every prefix was decoded: a replay of a 4,000-token reply took 4,000 decodes of up to
    # 4,000 tokens each for one reply.
    from agenthub.agents import SamplingParams
    from agenthub.repl._episode import reply_end

    decodes = 0

    class Counting:
        stop_token_ids = chat.stop_token_ids

        def decode(self, ids: Sequence[int]) -> str:
            nonlocal decodes
            decodes += 1
            return chat.decode(ids)

    counting: Any = Counting()
    sampling = SamplingParams(stop=("</answer>",))
    words = chat.encode_text(" word" * 500)
    for text, ids in [
        ("stop string", [*words, *chat.encode_text(" </answer> more"), *words]),
        ("stop token", [*words, chat.stop_token_ids[0], *chat.encode_text("</answer>")]),
        ("neither", words),
    ]:
        decodes = 0
        expected = next(
            (
                n
                for n in range(1, len(ids) + 1)
                if ids[n - 1] in chat.stop_token_ids or "</answer>" in chat.decode(ids[:n])
            ),
            None,
        )
        assert reply_end(counting, ids, sampling) == expected, text
        assert decodes <= 16, (text, decodes)


async def test_a_typed_reply_is_cut_where_a_sampled_one_would_stop(
    chat: ChatTokenizer, tmp_path: Path
) -> None:
    h = Harness(chat, "tests.unit._repl_envs:StopAtEqualsEnv")
    await h.repl.start()
    before = len(h.episode.session)
    out = await h.type("1 = 9 or so", "", "3", "")
    assert "note: the tokens decode to '1 ='" in out and "first stop string" in out
    cut, _ = h.episode.actions
    assert cut.text == "1 =" and cut.generation.token_ids == tuple(chat.encode_text("1 ="))
    assert h.episode.session.tokens[before : before + len(cut.generation.token_ids)] == list(
        cut.generation.token_ids
    )
    file = tmp_path / "t.jsonl"
    await h.type(f":save {file}", f":load {file}")
    assert "matches the saved one token for token" in await h.type("", "")
    assert [a.text for a in h.episode.actions] == ["1 =", "3"]
    await h.repl.aclose()


async def test_set_changes_and_shows_the_sampling(chat: ChatTokenizer) -> None:
    h = await started(chat, reply="1 2 3 4 5 6 7 8")
    out = await h.type(":set temperature 0.7", ":set max_tokens 2", ":set seed 3", ":set")
    assert "temperature 0.7  top_p 1  top_k -1  max_tokens 2  seed 3" in out
    await h.type(":gen")
    assert len(h.engine.generations[-1].token_ids) == 2
    assert "error: :set temperature -1" in await h.type(":set temperature -1")
    assert "error: :set KEY VALUE" in await h.type(":set colour blue")
    assert h.repl.sampling.temperature == 0.7
    await h.repl.aclose()


async def test_tokens_shows_every_token_by_kind_with_logprobs(chat: ChatTokenizer) -> None:
    h = await started(chat, reply="4")
    await h.type("3", "", ":gen")
    out = await h.type(":tokens")
    counts = {k: h.episode.kinds.count(k) for k in ("prompt", "env", "model", "human")}
    assert f"{len(h.episode.session)} tokens: {counts['prompt']} prompt (mask 0)" in out
    assert f"{counts['human']} typed by you (mask 0" in out
    assert f"{counts['model']} model-sampled (mask 1" in out and counts["model"] == 2
    first_sampled = h.episode.session.loss_mask.index(1)
    logprob = h.episode.session.logprobs[first_sampled]
    assert f"|4({logprob:.2f})" in out
    assert "|<|im_start|>|" in out
    assert "#" in await h.type(":tokens ids")
    await h.repl.aclose()


async def test_undo_replays_the_episode_but_the_last_step(chat: ChatTokenizer) -> None:
    h = await started(chat)
    await h.type("3", "")
    after_one = list(h.episode.session.tokens)
    await h.type("7", "")
    out = await h.type(":undo")
    assert "undone: back at step 1" in out and "Higher." in out
    assert h.episode.session.tokens == after_one and len(h.episode.actions) == 1
    await h.type(":undo")
    assert "nothing to undo" in await h.type(":undo")
    await h.repl.aclose()


async def test_save_then_load_reproduces_the_trajectory(
    chat: ChatTokenizer, tmp_path: Path
) -> None:
    file = tmp_path / "runs" / "saved.jsonl"
    h = await started(chat, reply=str(SECRET))
    await h.type("two", "lines", "", "3", "", ":gen")
    out = await h.type(f":save {file}")
    assert f"saved line 1 of {file}" in out and "3 steps, return 1" in out
    saved = Trajectory.model_validate_json(file.read_text())
    assert saved.terminated and saved.step_rewards == [0.0, 0.0, 1.0] and saved.num_turns == 3
    assert 1 in saved.loss_mask and saved.env == GUESS

    out = await h.type(f":load {file}")
    assert "loaded line 1" in out and h.repl.prompt.startswith("replay step 1")
    out = await h.type("", "", "")
    assert "replaying a typed action:\ntwo\nlines" in out and "replaying a model action" in out
    assert "matches the saved one token for token" in out
    again = h.episode.trajectory()
    assert again.model_dump(exclude={"timings"}) == saved.model_dump(exclude={"timings"})
    assert h.repl.replay is None
    await h.repl.aclose()


async def test_load_replays_the_model_replies_of_an_eval_trajectory(
    chat: ChatTokenizer, tmp_path: Path
) -> None:
    def reply(prompt: Sequence[int]) -> list[int]:
        guess = 2 + 2 * prompt.count(chat.stop_token_ids[0])  # 4, 6, 8, ... by turn
        return [*chat.encode_text(str(guess)), chat.stop_token_ids[0]]

    # agenthub eval's runner derives each episode's seed; replaying under --seed 0 must still
    # find the model's replies (the mask-1 runs), even where the env answers differently.
    config = RolloutConfig(sampling=SamplingParams(max_tokens=8), seed=0)
    runner = EpisodeRunner(FakeEngine(reply), chat, GUESS_SPEC, config)
    task = Task(id="held_out-0", prompt="Guess my number from 1 to 10.", label=10)
    [trajectory] = await runner.collect([task])
    file = tmp_path / "trajectories.jsonl"
    file.write_text(trajectory.model_dump_json() + "\n")
    h = await started(chat)
    await h.type(f":load {file} 1")
    out = await h.type("", "", "", "")
    runs, pos = [], 0
    while pos < len(trajectory.tokens):
        end = pos
        while end < len(trajectory.tokens) and trajectory.loss_mask[end] == 1:
            end += 1
        if end > pos:
            runs.append(chat.decode(trajectory.tokens[pos:end]))
        pos = end + 1
    assert len(runs) == trajectory.num_turns >= 1
    assert [a.text for a in h.episode.actions] == runs
    assert all(a.kind == "model" for a in h.episode.actions)
    assert "replay done" in out
    await h.repl.aclose()


async def test_an_env_that_raises_shows_its_traceback_and_the_repl_goes_on(
    chat: ChatTokenizer,
) -> None:
    h = await started(chat)
    before = list(h.episode.session.tokens)
    out = await h.type("boom", "")
    assert "env_error: step raised RuntimeError: the env blew up on purpose" in out
    assert "Traceback (most recent call last)" in out and "_repl_envs.py" in out
    assert "the step was not applied" in out
    assert h.episode.session.tokens == before and not h.episode.actions
    assert "step 1: reward 0" in await h.type("3", "")
    await h.repl.aclose()


async def test_an_env_whose_reset_raises_is_reported(chat: ChatTokenizer) -> None:
    h = await started(chat, env="tests.unit._repl_envs:BrokenResetEnv")
    out = h.buffer.getvalue()
    assert "env_error: reset raised OSError: the env cannot reach its data" in out
    assert "Traceback" in out and h.repl.episode is None
    assert "no episode is running" in await h.type("3", "")
    assert "env_error: reset raised" in await h.type(":reset")
    assert "unknown command :frobnicate" in await h.type(":frobnicate")
    await h.repl.aclose()


async def test_a_property_that_raises_is_named_rather_than_reset(chat: ChatTokenizer) -> None:
    h = await started(chat, env="tests.unit._repl_envs:RulesBugEnv")
    out = h.buffer.getvalue()
    assert "env_error: system_prompt raised KeyError: 'rules'" in out
    assert "reset raised" not in out and "_repl_envs.py" in out and h.repl.episode is None
    await h.repl.aclose()


async def test_an_env_returning_the_wrong_type_is_named_as_such(chat: ChatTokenizer) -> None:
    h = await started(chat)
    before = list(h.episode.session.tokens)
    out = await h.type("gym", "")
    assert "env_error: step must return agenthub.Step(" in out and "got a 5-tuple" in out
    assert "Traceback" not in out and "the step was not applied" in out
    assert h.episode.session.tokens == before and not h.episode.actions
    await h.repl.aclose()
    h = await started(chat, env="tests.unit._repl_envs:ObservationOnlyResetEnv")
    out = h.buffer.getvalue()
    assert "env_error: reset must return (observation, info), got list" in out
    assert h.repl.episode is None
    await h.repl.aclose()


async def test_an_env_whose_tasks_are_broken_is_named_with_the_line(chat: ChatTokenizer) -> None:
    with pytest.raises(
        AgentHubError, match=r"(?s)tasks\('held_out'\) raised ValidationError.*_envs"
    ):
        await Harness(chat, env="tests.unit._envs:IdlessTaskEnv").repl.start()
    with pytest.raises(AgentHubError, match=r"tasks\(\) yielded dict, not agenthub.Task"):
        await Harness(chat, env="tests.unit._envs:DictTasksEnv").repl.start()


async def test_bad_env_ids_and_task_indices_fail_clearly(chat: ChatTokenizer) -> None:
    with pytest.raises(EnvNotFoundError, match="no environment 'no-such-env'"):
        await Harness(chat, env="no-such-env").repl.start()
    h = Harness(chat)
    h.repl.task_index = 7
    with pytest.raises(AgentHubError, match="has 3 tasks; pick --task 0..2"):
        await h.repl.start()
    h = await started(chat)
    assert "error: task 5 does not exist" in await h.type(":reset 5")
    # The task that is not there was kept, and a plain :reset failed on it again.
    assert h.repl.task_index == 0 and "error" not in await h.type(":reset")
    out = await h.type(":reset 1")
    assert "Guess my number from 1 to 100." in out and h.repl.task_index == 1
    assert "not a trajectory" in await h.type(f":load {Path(__file__)}")
    await h.repl.aclose()


async def test_help_lists_every_command(chat: ChatTokenizer) -> None:
    h = await started(chat)
    out = await h.type(":help")
    for command in (":gen", ":set", ":tokens", ":reset", ":undo", ":save", ":load", ":quit"):
        assert command in out
    assert "empty line" in out and "loss mask 0" in out
    assert not await h.repl.feed(":quit")
    await h.repl.aclose()


async def test_a_model_that_cannot_start_is_reported(chat: ChatTokenizer) -> None:
    async def broken() -> InferenceEngine:
        raise RuntimeError("no memory for the KV cache")

    h = await started(chat, engine_factory=broken)
    out = await h.type(":gen")
    assert "generation_error: starting the model raised RuntimeError: no memory" in out
    assert "error: the model could not be started" in out and "Traceback" in out
    assert "step 1:" in await h.type("3", "")
    await h.repl.aclose()


def test_repl_help_lists_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["repl", "--help"])
    out = capsys.readouterr().out
    for option in ("--env", "--task", "--split", "--tasks", "--model", "--seed", "--max-reply"):
        assert option in out


def test_repl_without_a_model_directory_exits_with_a_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(["repl", "--env", "math", "--model", str(tmp_path)])
    assert code == 1 and "no config.json" in capsys.readouterr().err


def test_ctrl_c_cancels_the_running_entry_and_the_loop_goes_on() -> None:
    cancelled: list[bool] = []

    async def slow() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def quick() -> int:
        return 7

    loop = _Loop()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(slow())
        assert cancelled == [True]
        assert loop.run(quick()) == 7
    finally:
        loop.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_stops_code_that_blocks_the_loop() -> None:
    def press_ctrl_c_twice() -> None:
        for _ in range(2):
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGINT)

    async def blocking() -> None:
        time.sleep(30)  # noqa: ASYNC251 - an env that blocks: a cancellation never runs
        slept.append(True)

    async def quick() -> int:
        return 7

    slept: list[bool] = []
    loop = _Loop()
    presser = threading.Thread(target=press_ctrl_c_twice)
    try:
        presser.start()
        with pytest.raises(KeyboardInterrupt):
            loop.run(blocking())
        assert slept == [], "stopped inside the blocking call, not once it returned"
        assert loop.run(quick()) == 7
    finally:
        presser.join()
        loop.close()


def _pipe(monkeypatch: pytest.MonkeyPatch, *typed: str) -> None:
    lines = iter(typed)

    def piped(prompt: str) -> str:
        try:
            return next(lines)
        except StopIteration:
            raise EOFError from None

    monkeypatch.setattr("builtins.input", piped)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)


def test_piped_input_is_echoed_and_an_action_cut_off_by_its_end_is_sent(
    chat: ChatTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _pipe(monkeypatch, ":help", "3")  # no empty line after the action: the input just ends
    h = Harness(chat)
    assert run_terminal(h.repl) == 0
    out = h.buffer.getvalue()
    assert "\n:help\n" in out and "\n3\n" in out
    assert "step 1: reward 0" in out


def test_a_piped_session_with_failed_entries_exits_non_zero(
    chat: ChatTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _pipe(monkeypatch, ":nosuchcommand", "3", "", ":undo", ":undo")
    h = Harness(chat)
    assert run_terminal(h.repl) == 1
    assert "2 entries failed (see above)" in h.buffer.getvalue()


async def test_openrlhf_agent_text_observations_and_replay(
    chat: ChatTokenizer, fixtures: Path, tmp_path: Path
) -> None:
    h = await on_the_task_file(chat, fixtures, "openrlhf_agent", agent_func="agent_func_new.py")
    out = await h.type("it is 4", "")
    assert "score 0" in out and "wrong, try again" in out and '"turn": 1.0' in out
    out = await h.type("it is 5", "")
    assert "step 2: reward 1  return 1  terminated True" in out
    file = tmp_path / "agent.jsonl"
    await h.type(f":save {file}", f":load {file}")
    assert "matches the saved one token for token" in await h.type("", "")
    await h.repl.aclose()


def test_tab_completes_commands_settings_and_file_names(tmp_path: Path) -> None:
    (tmp_path / "run.jsonl").write_text("")
    (tmp_path / "runs").mkdir()
    assert completions(":to", ":to") == [":tokens "]
    assert completions(":set te", "te") == ["temperature "]
    assert completions(":set ", "") == [f"{key} " for key in SETTINGS]
    assert completions(f":load {tmp_path}/ru", f"{tmp_path}/ru") == [
        f"{tmp_path}/run.jsonl ",
        f"{tmp_path}/runs/",
    ]
    assert completions("def f(x):", "f(x):") == []
    assert completions("", "") == []


async def test_a_malformed_task_file_is_reported(chat: ChatTokenizer, tmp_path: Path) -> None:
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"question": "no prompt field"}\n')
    with pytest.raises(AgentHubError, match="no 'prompt' field"):
        await Harness(chat, tasks_file=bad).repl.start()
    with pytest.raises(AgentHubError, match="no such file"):
        await Harness(chat, tasks_file=tmp_path / "missing.jsonl").repl.start()


async def test_no_chat_template_tokenizes_a_text_prompt_as_it_is(
    chat: ChatTokenizer, tmp_path: Path
) -> None:
    reward = tmp_path / "reward.py"
    reward.write_text("def reward_func(queries, prompts, labels):\n    return [1.0]\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "2 + 2 ="}\n')
    h = Harness(chat, env="reward_func", env_kwargs={"reward_func": str(reward)},
                tasks_file=tasks, chat_template=False)  # fmt: skip
    await h.repl.start()
    assert h.episode.session.tokens == chat.encode_text("2 + 2 =")


async def test_an_answer_the_chat_template_cannot_render_stops_the_episode_until_undone(
    chat: ChatTokenizer, tmp_path: Path
) -> None:
    refusing = copy.copy(chat.tokenizer)
    refusing.chat_template = (
        "{% for m in messages %}{% if m.role == 'tool' %}"
        "{{ raise_exception('tool role is not supported') }}{% endif %}{% endfor %}"
        + chat.tokenizer.chat_template
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "Go.", "label": 3, "role": "tool"}\n')
    h = Harness(ChatTokenizer(refusing), env="tests.unit.agents._envs:TrackedEnv",
                tasks_file=tasks)  # fmt: skip
    await h.repl.start()
    out = await h.type("1", "")
    assert "cannot render messages with roles ['tool']" in out
    assert "The env took the step (reward 0), but its answer is not in the token stream" in out
    assert "env_error" not in out  # the env did nothing wrong
    out = await h.type("2", "")
    assert "the env's answer to step 1 cannot be tokenized: :undo or :reset" in out
    await h.type(":undo")
    assert h.episode.stuck is None and not h.episode.steps


async def test_a_tool_env_shows_its_tools_and_answers_typed_calls(chat: ChatTokenizer) -> None:
    from agenthub.agents.default_model._tokenizer import CHAT_TEMPLATE

    showing = copy.copy(chat.tokenizer)
    showing.chat_template = CHAT_TEMPLATE
    h = Harness(ChatTokenizer(showing), env="tests.unit._tool_envs:Calculator")
    await h.repl.start()
    out = h.buffer.getvalue()
    assert "tools (3), shown to the model by the chat template:" in out
    assert "add(a, b)  Add two integers." in out and "multiply(a, b)  Multiply" in out
    out = await h.type('<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>', "")
    assert "[tool add] 5" in out
    out = await h.type("5", "")
    assert "reward 1  return 1  terminated True" in out
    await h.repl.aclose()
    # With a template that cannot show tools the REPL does not start, and says why.
    h = Harness(chat, env="tests.unit._tool_envs:Calculator")
    with pytest.raises(AgentHubError, match=r"does not show the model the tools \['add', "):
        await h.repl.start()
    assert h.repl.episode is None


async def test_a_reward_file_sees_the_templated_sequence_in_the_repl(
    chat: ChatTokenizer, fixtures: Path
) -> None:
    h = await on_the_task_file(chat, fixtures, "reward_func", reward_func="openrlhf_reward_chat.py")
    out = await h.type("it is 5", "")
    assert "step 1: reward 1  return 1  terminated True" in out and '"templated": 1.0' in out
    await h.repl.aclose()
