"""Learner weights reach a running in-process vLLM engine, as a state dict or broadcast through
vLLM's weight-transfer API: after a sync the engine samples from the new weights (its logprobs
equal transformers' on them) under the new policy version."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

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


class EngineClient:
    """vLLM's trainer-side client over an engine in this process, for a sender on a thread."""

    def __init__(self, engine: VLLMEngine, loop: asyncio.AbstractEventLoop) -> None:
        self.engine, self.loop, self.version = engine, loop, 0

    def _wait(self, coro: Any) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self._wait(self.engine.init_weight_transfer({**init_info, "rank_offset": 1}))

    def start_weight_update(self) -> None:
        self._wait(self.engine.start_weight_update(self.version))

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self._wait(self.engine.receive_weights(update_info))

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self._wait(self.engine.finish_weight_update())


@pytest.mark.timeout(900)
def test_learner_broadcasts_its_zero3_weights_into_vllm_over_gloo(tiny_model: Path) -> None:
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    from agenthub.agents._weight_transfer import BACKEND, GlooTrainerInitInfo, register
    from agenthub.trainer import Learner, LearnerConfig, TrainBatch
    from agenthub.trainer._weight_sync import LearnerSource, _free_port

    learner = Learner(tiny_model, LearnerConfig(zero_stage=3, lr=5e-2, micro_batch_size=2))
    sampling = SamplingParams(max_tokens=8, temperature=1.0, seed=3)
    register()

    async def scenario() -> None:
        engine = VLLMEngine(tiny_model, max_model_len=256, weight_transfer=BACKEND)
        try:
            assert engine.transfer_ranks == 1
            client = EngineClient(engine, asyncio.get_running_loop())
            info = GlooTrainerInitInfo(
                master_address="127.0.0.1", master_port=_free_port(), world_size=2, rank=0
            )
            source = LearnerSource(learner.engine.module, zero3=True)
            sender = await asyncio.to_thread(
                WeightTransferTrainerFactory.trainer_init, info, client=client, source=source
            )
            before = await engine.generate(PROMPT, sampling)
            reply = list(before.token_ids)
            learner.step(
                TrainBatch.collate(
                    [PROMPT + reply],
                    [[0] * len(PROMPT) + [1] * len(reply)],
                    [[0.0] * len(PROMPT) + list(before.logprobs)],
                    [1.0],
                )
            )
            state = learner.state_dict()

            running = [asyncio.create_task(engine.generate(PROMPT, sampling)) for _ in range(3)]
            await asyncio.sleep(0)
            client.version = 1
            await asyncio.to_thread(sender.send_weights)
            assert {g.policy_version for g in await asyncio.gather(*running)} == {0}

            after = await engine.generate(PROMPT, sampling)
            assert after.policy_version == 1
            expected = transformers_logprobs(tiny_model, state, PROMPT, after.token_ids)
            assert list(after.logprobs) == pytest.approx(expected, abs=1e-3)
            old_on_same = transformers_logprobs(tiny_model, None, PROMPT, after.token_ids)
            assert list(after.logprobs) != pytest.approx(old_on_same, abs=1e-3), "weights changed"

            client.version = 0
            with pytest.raises(ValueError, match="may only grow"):
                await asyncio.to_thread(sender.send_weights)
            assert (await engine.generate(PROMPT, sampling)).policy_version == 1, "still serving"
            sender.shutdown()
        finally:
            await engine.aclose()

    asyncio.run(scenario())
