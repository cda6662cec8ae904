"""The ReAct program of docs/agent-programs.md runs as written: its code, taken from the page,
plays a `code_exec` task through the endpoint, its `run_python` tool call goes to the sandbox
and back, and the reply it returns is graded. Only the sandbox is a fake (no Docker in unit
tests), handed to the program where it calls `open_sandbox`, with the arguments it passes
checked against the real `open_sandbox`."""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Sequence
from typing import Any

import pytest

from agenthub.agents import ChatTokenizer, EpisodeRunner, FakeEngine, RolloutConfig, SamplingParams
from agenthub.envs.code_exec import CodeExecEnv
from agenthub.sandbox import FakeSandbox, Sandbox, open_sandbox
from tests.code_tasks import function_task
from tests.unit.agents.test_openai_endpoint import token_differences
from tests.unit.test_readme import REPO, example

pytestmark = pytest.mark.anyio

PAGE = REPO / "docs" / "agent-programs.md"
CODE = "print(2 + 3)"
CALL = '<tool_call>{"name": "run_python", "arguments": {"code": "print(2 + 3)"}}</tool_call>'
ANSWER = "It adds.\n```python\ndef add(a, b):\n    return a + b\n```"
TASK = function_task("add", "assert add(1, 2) == 3", "assert add(-1, 1) == 0")


def coder_engine(chat: ChatTokenizer) -> FakeEngine:
    """Runs code with the tool until a tool has answered, then answers with the function."""

    def reply(prompt: Sequence[int]) -> list[int]:
        last = chat.decode_all(prompt).rsplit("<|im_start|>", 2)[-2]
        text = ANSWER if last.startswith("tool") else CALL
        return [*chat.encode_text(text), chat.closing_ids[0]]

    return FakeEngine(reply, stop_token_ids=chat.stop_token_ids, decode=chat.decode)


def code_exec_on_a_fake_sandbox(**kwargs: Any) -> CodeExecEnv:
    """`code_exec`, the docs' verifier, grading in a `FakeSandbox` instead of Docker."""
    return CodeExecEnv(sandbox=FakeSandbox(), **kwargs)


def install_docs_program(monkeypatch: pytest.MonkeyPatch, sandbox: Sandbox) -> None:
    """Put the page's program where the docs' command finds it, `my_agents.react:agent`, with
    `sandbox` given where it opens one."""
    namespace = example(PAGE, "is graded by `code_exec`.")

    def fake_open(*args: Any, **kwargs: Any) -> Sandbox:
        inspect.signature(open_sandbox).bind(*args, **kwargs)  # a call the real one takes
        return sandbox

    namespace["open_sandbox"] = fake_open
    module = types.ModuleType("my_agents.react")
    module.agent = namespace["agent"]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "my_agents", types.ModuleType("my_agents"))
    monkeypatch.setitem(sys.modules, "my_agents.react", module)


async def test_the_docs_react_program_runs_its_tool_in_the_sandbox_and_is_graded(
    tool_chat: ChatTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox = FakeSandbox()
    install_docs_program(monkeypatch, sandbox)
    engine = coder_engine(tool_chat)
    env_kwargs = {
        "program": "my_agents.react:agent",
        "verifier": f"{__name__}:code_exec_on_a_fake_sandbox",
        "verifier_kwargs": {"max_turns": 1},
    }
    config = RolloutConfig(sampling=SamplingParams(max_tokens=200))  # room for a tool call
    runner = EpisodeRunner(engine, tool_chat, "agent_program", config, env_kwargs=env_kwargs)
    [t] = await runner.collect([TASK])
    assert t.error is None, t.error
    assert (t.reward, t.num_turns, t.segments) == (1.0, 2, [])  # graded, one append-only episode
    # The tool call reached the sandbox, and its output came back to the model as a tool turn.
    assert [request.code for request in sandbox.requests] == [CODE]
    first, second = engine.requests
    added = tool_chat.decode_all(second[len(first) + len(engine.generations[0].token_ids) :])
    assert "<|im_start|>tool" in added and "5\n" in added
    assert token_differences(t, engine) == 0
