"""Multi-turn episodes through real in-process vLLM keep exactly the sampled tokens, and their
rollout logprobs match a float32 recomputation by transformers on the same weights."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import agenthub
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
    generations: list[Generation]

    async def generate(self, prompt_ids, sampling):  # type: ignore[no-untyped-def]
        generation = await super().generate(prompt_ids, sampling)
        self.generations.append(generation)
        return generation


def recompute_logprobs(model_dir: Path, trajectories: list[Trajectory]) -> list[list[float]]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32)
    model.eval()
    out = []
    with torch.no_grad():
        for t in trajectories:
            ids = torch.tensor([t.tokens])
            logprobs = model(ids).logits.float().log_softmax(-1)[0]
            out.append(
                [0.0] + [float(logprobs[i - 1, t.tokens[i]]) for i in range(1, len(t.tokens))]
            )
    return out


@pytest.mark.timeout(600)
def test_multi_turn_vllm_episodes_are_token_exact(tiny_model: Path) -> None:
    agenthub.register("agents-test-tracked", "tests.unit.agents._envs:TrackedEnv", override=True)
    chat = ChatTokenizer.from_pretrained(tiny_model)
    tasks = [Task(id=f"t{i}", prompt="Count down with me.", label=3) for i in range(3)]
    config = RolloutConfig(
        sampling=SamplingParams(max_tokens=12, temperature=1.0, seed=7),
        max_turns=3,
        n_samples_per_prompt=2,
        concurrency=6,
    )

    async def play() -> tuple[list[Trajectory], list[Generation]]:
        engine = RecordingEngine(tiny_model, max_model_len=512, max_num_seqs=8)
        engine.generations = []
        engine.set_policy_version(2)
        try:
            runner = EpisodeRunner(engine, chat, "agents-test-tracked", config)
            return await runner.collect(tasks), engine.generations
        finally:
            await engine.aclose()

    trajectories, generations = asyncio.run(play())
    assert len(trajectories) == 6
    assert all(t.error is None and t.num_turns == 3 for t in trajectories)
    # Every model token is the engine's: the masked spans are exactly the generations.
    by_span = {tuple(g.token_ids): g for g in generations}
    spans = 0
    for t in trajectories:
        i = 0
        while i < len(t.tokens):
            if not t.loss_mask[i]:
                i += 1
                continue
            j = i
            while j < len(t.tokens) and t.loss_mask[j]:
                j += 1
            g = by_span[tuple(t.tokens[i:j])]
            assert t.logprobs[i:j] == list(g.logprobs)
            assert set(t.policy_versions[i:j]) == {2}
            spans += 1
            i = j
    assert spans == len(generations) == 18
    # Replies cut off by length were closed with the template's tokens before the next turn.
    assert any(g.finish_reason == "length" for g in generations)
    # The trainer's view: recomputed logprobs of the stored sequence match the rollout's.
    for t, recomputed in zip(
        trajectories, recompute_logprobs(tiny_model, trajectories), strict=True
    ):
        for i, m in enumerate(t.loss_mask):
            if m:
                assert recomputed[i] == pytest.approx(t.logprobs[i], abs=1e-3), (t.task_id, i)


def expected_stop(chat: ChatTokenizer, free: Generation, stop: str) -> tuple[int, ...]:
    """The tokens a reply ended by `stop` keeps: those sampled up to the one completing it."""
    return next(
        free.token_ids[:i]
        for i in range(1, len(free.token_ids) + 1)
        if stop in chat.decode(free.token_ids[:i])
    )


def pick_stop(chat: ChatTokenizer, free: Generation) -> str:
    """A few characters the free reply writes a few tokens in."""
    text = chat.decode(free.token_ids[:6])
    assert len(text.strip()) >= 3, f"the reply should have words in it: {text!r}"
    return text.rstrip()[-3:]


@pytest.mark.timeout(600)
def test_a_stop_string_ends_a_vllm_reply_with_the_tokens_as_sampled() -> None:
    from agenthub import Message
    from agenthub.agents.default_model import ensure_default_model

    model = ensure_default_model()
    chat = ChatTokenizer.from_pretrained(model)
    prompt = chat.encode_prompt([Message(role="user", content="What is 12 + 30?")])

    async def ask() -> tuple[Generation, Generation, str]:
        engine = VLLMEngine(model, max_num_seqs=2)
        try:
            sampling = SamplingParams(max_tokens=24, seed=5, temperature=1.0)
            free = await engine.generate(prompt, sampling)
            stop = pick_stop(chat, free)
            stopped = await engine.generate(prompt, sampling.replace(stop=(stop,)))
            return free, stopped, stop
        finally:
            await engine.aclose()

    free, stopped, stop = asyncio.run(ask())
    kept = expected_stop(chat, free, stop)
    assert len(kept) < len(free.token_ids), "the stop string came before the reply's end"
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == kept
    assert stopped.logprobs == pytest.approx(free.logprobs[: len(kept)], abs=1e-4)
