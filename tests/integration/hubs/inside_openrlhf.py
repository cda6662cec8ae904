"""The agent file `agenthub export openrlhf` writes, run by the real OpenRLHF inside a venv
that has it (test_integration_openrlhf.py): OpenRLHF's own `MultiTurnAgentExecutor.execute`
plays `math` with it, and so does agenthub's `openrlhf_agent` env on OpenRLHF's classes.
OpenRLHF's inputs to `execute`, a vLLM engine and a Hugging Face tokenizer, are small
stand-ins here: a scripted engine and a tokenizer of one token per character."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

import agenthub
from agenthub.cli import main
from agenthub.envs import _openrlhf

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PROMPT = "What is 6 * 7? Answer in \\boxed{}.\n"


class CharTokenizer:
    def __call__(self, text: str, add_special_tokens: bool, return_tensors: str) -> Any:
        return {"input_ids": torch.tensor([[ord(c) for c in text]])}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(map(chr, ids))


class ScriptedEngine:
    """vLLM's `generate` as OpenRLHF calls it, answering with the given replies in turn."""

    def __init__(self, replies: list[str]) -> None:
        self._replies = list(replies)

    async def generate(self, tokens: list[int], sampling: Any, multi_modal_data: Any = None) -> Any:
        text = self._replies.pop(0)
        output = SimpleNamespace(
            token_ids=[ord(c) for c in text], text=text, finish_reason="stop", logprobs=None
        )
        return SimpleNamespace(outputs=[output])


@pytest.fixture
def agent_file(tmp_path: Path) -> Path:
    out = tmp_path / "agent_func.py"
    assert main(["export", "openrlhf", "--env", "math", "max_attempts=2", "-o", str(out)]) == 0
    return out


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_func", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_openrlhf_is_the_real_package() -> None:
    import openrlhf.utils.agent

    assert _openrlhf.installed()
    assert "site-packages" in str(openrlhf.utils.agent.__file__)


async def test_openrlhf_s_executor_plays_math_with_the_exported_file(agent_file: Path) -> None:
    from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

    module = load(agent_file)
    executor = module.AgentExecutor()
    assert isinstance(executor, MultiTurnAgentExecutor)
    assert issubclass(executor.agent_instance_cls, AgentInstanceBase)
    engine = ScriptedEngine(["\\boxed{41}", "\\boxed{42}"])
    sampling = SimpleNamespace(max_tokens=None, logprobs=None)
    result = await executor.execute(PROMPT, "42", sampling, 4096, CharTokenizer(), engine)
    assert (result["reward"], result["scores"]) == (1.0, 1.0)
    assert result["extra_logs"] == {"attempts": 2.0, "correct": 1.0}
    text = "".join(map(chr, result["observation_tokens"]))
    assert text.startswith(PROMPT + "\\boxed{41}\nuser: Incorrect, try again.")
    assert text.endswith("\nassistant: \\boxed{42}")
    assert len(result["action_ranges"]) == 2


async def test_agenthub_s_openrlhf_agent_env_runs_it_on_openrlhf_s_classes(
    agent_file: Path, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"prompt": PROMPT, "label": "42"}))
    env = agenthub.make("openrlhf_agent", agent_func=str(agent_file), dataset=str(tasks))
    [task] = env.tasks("train")
    await env.reset(task)
    step = await env.step("\\boxed{42}")
    assert (step.reward, step.score, step.terminated) == (1.0, 1.0, True)
    await env.aclose()
