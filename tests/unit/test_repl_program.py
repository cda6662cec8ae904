"""`agenthub repl` on `agent_program`: `:gen` plays the program's whole episode against the
REPL's model, each call shown as it is served, through the endpoint train and eval use."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

import pytest

from agenthub import Task
from agenthub.agents import (
    ChatTokenizer,
    EpisodeRunner,
    FakeEngine,
    Generation,
    InferenceEngine,
    RolloutConfig,
    SamplingParams,
    Trajectory,
)
from tests.tiny_model import build_tokenizer
from tests.unit.agents.test_agent_program import echo_engine, raise_engine
from tests.unit.agents.test_openai_endpoint import react_engine, token_differences
from tests.unit.test_repl import Harness

pytestmark = pytest.mark.anyio

PROGRAMS = "tests.unit.agents._programs"
MAX_TOKENS = 200
TASK = Task(id="t1", prompt="What is 2 + 3?", label="5")  # task 0 of the fixtures' task file


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    """The test tokenizer with the default model's chat template, which shows tools."""
    from agenthub.agents.default_model._tokenizer import CHAT_TEMPLATE

    out: Path = tmp_path_factory.mktemp("tiny-tokenizer")
    build_tokenizer(out)
    tokenizer = copy.copy(ChatTokenizer.from_pretrained(out).tokenizer)
    tokenizer.chat_template = CHAT_TEMPLATE
    return ChatTokenizer(tokenizer)


async def on_program(
    chat: ChatTokenizer, fixtures: Path, engine: FakeEngine, **env_kwargs: object
) -> Harness:
    """A started REPL on `agent_program` with `env_kwargs`, on the fixtures' task file, whose
    `:gen` samples from `engine`."""

    async def build() -> InferenceEngine:
        return engine

    kwargs = {"reward": f"{PROGRAMS}:task_reward", **env_kwargs}
    h = Harness(
        chat,
        env="agent_program",
        env_kwargs=kwargs,
        engine_factory=build,
        tasks_file=fixtures / "tasks.jsonl",
    )
    await h.repl.start()
    await h.type(f":set max_tokens {MAX_TOKENS}")  # room for a whole tool call
    return h


def flat(text: str) -> str:
    """`text` with the console's line wrapping undone (any run of whitespace as one space)."""
    return " ".join(text.split())


def played(h: Harness) -> Trajectory:
    assert h.repl.program is not None and h.repl.program.trajectory is not None
    return h.repl.program.trajectory


async def test_gen_shows_each_call_and_its_tool_calls_then_the_reward(
    chat: ChatTokenizer, fixtures: Path, tmp_path: Path
) -> None:
    engine = react_engine(chat)
    h = await on_program(chat, fixtures, engine, program=f"{PROGRAMS}:react")
    opening = flat(h.buffer.getvalue())
    assert "task 0: t1" in opening and "What is 2 + 3?" in opening
    assert "(unseeded: each :gen samples afresh; :set seed N repeats an episode)" in opening
    assert "seed None" not in opening
    assert f"its program ({PROGRAMS}:react) plays the episode" in opening
    assert "you cannot type its actions" in opening
    assert h.repl.prompt == "agent_program :gen> "

    out = await h.type(":gen")
    first, second = engine.requests
    assert f"call 1 opens segment 1; its prompt, {len(first)} tokens:" in out
    assert chat.decode_all(first) in out
    assert 'tool call the program gets: add({"a": 2, "b": 3})' in out
    # The second call shows exactly the tokens its prompt adds: the tool's answer.
    added = second[len(first) + len(engine.generations[0].token_ids) :]
    assert f"call 2 extends segment 1: the program's messages add {len(added)} tokens:" in out
    assert chat.decode_all(added) in out and "5" in chat.decode_all(added)
    assert out.count("model (") == 2 and "The sum is 5." in out
    assert "episode over: reward 1  2 calls in 1 segment  terminated True  truncated False" in out
    assert "the program returned:\nThe sum is 5.\n" in out.split("episode over")[1]
    assert "info:" not in out  # the reward function gives none

    # The episode is the one train and eval would get from the same engine, token for token.
    t = played(h)
    assert token_differences(t, engine) == 0
    config = RolloutConfig(sampling=SamplingParams(max_tokens=MAX_TOKENS))
    kwargs = {"program": f"{PROGRAMS}:react", "reward": f"{PROGRAMS}:task_reward"}
    runner = EpisodeRunner(react_engine(chat), chat, "agent_program", config, env_kwargs=kwargs)
    [direct] = await runner.collect([TASK])
    assert (t.tokens, t.loss_mask, t.logprobs) == (direct.tokens, direct.loss_mask, direct.logprobs)

    tokens = await h.type(":tokens")
    assert f"{len(t.tokens)} tokens: {len(first)} a segment's opening prompt (mask 0)" in tokens
    assert f"{len(added)} what the program added between calls (mask 0)" in tokens
    assert "segment 1 of" not in tokens  # one segment: no headers

    saved = tmp_path / "saved.jsonl"
    out = await h.type(f":save {saved}")
    assert f"saved line 1 of {saved}: {len(t.tokens)} tokens, 2 calls, return 1" in out
    assert Trajectory.model_validate_json(saved.read_text()) == t
    assert h.repl.failures == 0
    await h.repl.aclose()


async def test_a_rewritten_history_shows_the_segment_it_opens(
    chat: ChatTokenizer, fixtures: Path
) -> None:
    engine = echo_engine(chat)
    h = await on_program(
        chat,
        fixtures,
        engine,
        program=f"{PROGRAMS}:summarising",
        reward=f"{PROGRAMS}:length_reward",
    )
    out = await h.type(":gen")
    assert "call 2 extends segment 1" in out
    assert "call 3 opens segment 2 (the program rewrote its history: a separate training" in out
    assert chat.decode_all(engine.requests[2]) in out
    assert "3 calls in 2 segments" in out
    tokens = await h.type(":tokens")
    assert "── segment 1 of 2" in tokens and "── segment 2 of 2" in tokens
    # A second :gen plays a fresh episode on the same engine.
    assert "call 1 opens segment 1" in await h.type(":gen")
    assert len(engine.generations) == 6
    await h.repl.aclose()


@pytest.mark.parametrize(
    ("program", "budget_s", "says"),
    [
        ("raising", 5.0, "env_error: the agent program raised KeyError: 'no such tool'"),
        ("hanging", 0.2, "env_error: the agent program ran past its budget of 0.2 s"),
        ("silent", 5.0, "env_error: the agent program returned without calling the model"),
    ],
)
async def test_a_failing_program_shows_its_typed_error_and_the_repl_goes_on(
    chat: ChatTokenizer, fixtures: Path, program: str, budget_s: float, says: str
) -> None:
    engine = echo_engine(chat)
    h = await on_program(chat, fixtures, engine, program=f"{PROGRAMS}:{program}", budget_s=budget_s)
    out = await h.type(":gen")
    assert says in out
    calls = len(engine.generations)
    assert f"the episode failed after {calls} call" in flat(out) and "episode over" not in out
    assert out.count("call 1 opens segment 1") == calls
    assert h.repl.failures == 1
    assert "task 1: t2" in await h.type(":reset 1")  # the session goes on
    assert says in await h.type(":gen")
    assert h.repl.failures == 2
    await h.repl.aclose()


async def test_an_engine_failure_is_shown_on_its_call_and_typed_as_the_engine_s(
    chat: ChatTokenizer, fixtures: Path
) -> None:
    engine = FakeEngine(lambda prompt: raise_engine() or [])
    h = await on_program(chat, fixtures, engine, program=f"{PROGRAMS}:raising")
    out = await h.type(":gen")
    assert "the engine failed on this call: EngineError: the fake engine is down" in out
    assert "generation_error: the fake engine is down" in out
    await h.repl.aclose()


async def test_typing_undo_and_load_say_that_the_program_owns_the_loop(
    chat: ChatTokenizer, fixtures: Path
) -> None:
    h = await on_program(chat, fixtures, echo_engine(chat), command="python my_agent.py")
    assert "its program (python my_agent.py) plays the episode" in flat(h.buffer.getvalue())
    out = flat(await h.type("the answer is 5", ""))
    assert (
        "error: agent_program's episodes are played by its program (python my_agent.py), which "
        "writes every request itself: there is no action to type. :gen runs the program" in out
    )
    for command in (":undo", ":load saved.jsonl"):
        assert "plays each episode whole, so there are no steps" in flat(await h.type(command))
    assert "no episode was played on this task yet: :gen runs" in flat(await h.type(":tokens"))
    assert "you cannot type its actions" in flat(await h.type(":help"))
    assert h.repl.failures == 4
    await h.repl.aclose()


class SeedRecordingEngine(FakeEngine):
    """An echo engine that keeps the sampling seed of each call."""

    def __init__(self, chat: ChatTokenizer) -> None:
        echo = echo_engine(chat)
        super().__init__(echo._reply, stop_token_ids=chat.stop_token_ids)
        self.seeds: list[int | None] = []

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        self.seeds.append(sampling.seed)
        return await super().generate(prompt_ids, sampling)


async def test_the_header_names_the_sampling_seed_the_program_s_calls_use(
    chat: ChatTokenizer, fixtures: Path
) -> None:
    engine = SeedRecordingEngine(chat)
    h = await on_program(
        chat,
        fixtures,
        engine,
        program=f"{PROGRAMS}:summarising",
        reward=f"{PROGRAMS}:length_reward",
    )
    await h.type(":set seed 7")
    header = flat(await h.type(":reset 0"))
    assert "task 0: t1 (sampling seed 7, one more for each later call of an episode)" in header
    await h.type(":gen")
    assert engine.seeds == [7, 8, 9]
    await h.repl.aclose()


async def test_a_verifier_s_info_and_the_program_s_result_are_shown_beside_the_reward(
    chat: ChatTokenizer, fixtures: Path
) -> None:
    verifier = f"{PROGRAMS}:ContainsLabel"
    h = await on_program(
        chat,
        fixtures,
        echo_engine(chat),
        program=f"{PROGRAMS}:summarising",
        verifier=verifier,
        reward=None,
    )
    out = await h.type(":gen")
    after = out.split("episode over: reward 0")[1]
    assert "the program returned:\nok t1\n" in after
    assert 'info: {"label_found": false}' in after
    await h.repl.aclose()


async def test_a_result_that_fails_scoring_is_shown_with_the_error(
    chat: ChatTokenizer, fixtures: Path
) -> None:
    h = await on_program(
        chat,
        fixtures,
        echo_engine(chat),
        program=f"{PROGRAMS}:dict_result",
        verifier=f"{PROGRAMS}:ContainsLabel",
        reward=None,
    )
    out = await h.type(":gen")
    assert "env_error: the agent program returned dict, but verifier" in out
    assert 'the program returned:\n{"answer": "ok t1"}' in out
    assert "episode over" not in out and h.repl.failures == 1
    await h.repl.aclose()
