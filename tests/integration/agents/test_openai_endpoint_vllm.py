"""An agent program through the endpoint on real in-process vLLM keeps exactly the sampled
tokens, across an append-only loop and a rewritten history."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from agenthub import Task
from agenthub.agents import (
    ChatTokenizer,
    EpisodeRunner,
    Generation,
    RolloutConfig,
    SamplingParams,
    Trajectory,
    VLLMEngine,
)

pytestmark = pytest.mark.integration


class RecordingEngine(VLLMEngine):
    served: dict[tuple[int, ...], Generation]

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        generation = await super().generate(prompt_ids, sampling)
        self.served[tuple(prompt_ids)] = generation
        return generation


def model_spans(t: Trajectory) -> list[tuple[int, int]]:
    spans, i = [], 0
    while i < len(t.tokens):
        j = i
        while j < len(t.tokens) and t.loss_mask[j] == t.loss_mask[i]:
            j += 1
        if t.loss_mask[i]:
            spans.append((i, j))
        i = j
    return spans


@pytest.mark.timeout(600)
def test_a_program_s_calls_on_vllm_are_the_engine_s_tokens() -> None:
    from agenthub.agents.default_model import ensure_default_model

    model = ensure_default_model()
    chat = ChatTokenizer.from_pretrained(model)
    config = RolloutConfig(sampling=SamplingParams(max_tokens=16, seed=3), concurrency=4)
    env_kwargs = {
        "program": "tests.unit.agents._programs:summarising",
        "reward": "tests.unit.agents._programs:length_reward",
    }
    tasks = [Task(id=f"t{i}", prompt="-") for i in range(2)]

    async def play() -> tuple[list[Trajectory], dict[tuple[int, ...], Generation]]:
        engine = RecordingEngine(model, max_num_seqs=4)
        engine.served = {}
        engine.set_policy_version(4)
        try:
            env = "agenthub.envs.agent_program:AgentProgramEnv"
            runner = EpisodeRunner(engine, chat, env, config, env_kwargs=env_kwargs)
            return await runner.collect(tasks), engine.served
        finally:
            await engine.aclose()

    trajectories, served = asyncio.run(play())
    assert len(served) == 6
    for t in trajectories:
        assert t.error is None, t.error
        assert len(t.segments) == 1 and t.num_turns == 3
        differences = 0
        for segment in t.segment_trajectories():
            for i, j in model_spans(segment):
                g = served[tuple(segment.tokens[:i])]
                given = segment.tokens[i:j]
                differences += sum(a != b for a, b in zip(g.token_ids, given, strict=False))
                differences += abs(len(g.token_ids) - len(given))
                assert segment.logprobs[i:j] == list(g.logprobs)
                assert set(segment.policy_versions[i:j]) == {4}
        assert differences == 0
