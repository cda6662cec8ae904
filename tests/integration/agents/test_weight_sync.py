"""Learner weights reach a running in-process vLLM engine: after a sync the engine samples
from the new weights (its logprobs equal transformers' on them) under the new policy version."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agenthub.agents import SamplingParams, VLLMEngine

pytestmark = pytest.mark.integration
PROMPT = [5, 17, 40, 41, 99, 120]


def transformers_logprobs(
    model_dir: Path, state: dict | None, prompt: list[int], reply: tuple[int, ...]
) -> list[float]:  # type: ignore[type-arg]
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32).eval()
    if state is not None:
        model.load_state_dict(state)
    ids = torch.tensor([prompt + list(reply)])
    with torch.no_grad():
        logprobs = model(ids).logits.float().log_softmax(-1)[0]
    return [float(logprobs[len(prompt) - 1 + i, t]) for i, t in enumerate(reply)]


@pytest.mark.timeout(900)
def test_learner_step_synced_into_vllm_changes_what_it_samples(tiny_model: Path) -> None:
    from agenthub.trainer import Learner, LearnerConfig, TrainBatch

    learner = Learner(tiny_model, LearnerConfig(zero_stage=3, lr=5e-2, micro_batch_size=2))
    sampling = SamplingParams(max_tokens=8, temperature=1.0, seed=3)

    async def scenario() -> None:
        engine = VLLMEngine(tiny_model, max_model_len=256)
        try:
            before = await engine.generate(PROMPT, sampling)
            assert before.policy_version == 0
            expected = transformers_logprobs(tiny_model, None, PROMPT, before.token_ids)
            assert list(before.logprobs) == pytest.approx(expected, abs=1e-3)

            reply = list(before.token_ids)
            batch = TrainBatch.collate(
                [PROMPT + reply],
                [[0] * len(PROMPT) + [1] * len(reply)],
                [[0.0] * len(PROMPT) + list(before.logprobs)],
                [1.0],
            )
            learner.step(batch)
            state = learner.state_dict()

            # Requests already running finish on the old weights; the sync waits for them.
            running = [asyncio.create_task(engine.generate(PROMPT, sampling)) for _ in range(3)]
            await asyncio.sleep(0)
            await engine.update_weights(state, version=1)
            assert {g.policy_version for g in await asyncio.gather(*running)} == {0}

            after = await engine.generate(PROMPT, sampling)
            assert after.policy_version == 1
            new_expected = transformers_logprobs(tiny_model, state, PROMPT, after.token_ids)
            assert list(after.logprobs) == pytest.approx(new_expected, abs=1e-3)
            old_on_same = transformers_logprobs(tiny_model, None, PROMPT, after.token_ids)
            assert list(after.logprobs) != pytest.approx(old_on_same, abs=1e-3), "weights changed"
            with pytest.raises(ValueError, match="may only grow"):
                await engine.update_weights(state, version=0)
        finally:
            await engine.aclose()

    asyncio.run(scenario())
    assert not list(Path("/dev/shm").glob("agenthub-weights-*")), "sync files are removed"
