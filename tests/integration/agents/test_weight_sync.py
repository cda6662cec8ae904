"""Learner weights reach a running in-process vLLM engine, as a state dict or broadcast through
vLLM's weight-transfer API: after a sync the engine samples from the new weights (its logprobs
equal transformers' on them) under the new policy version."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agenthub.agents import EngineError, SamplingParams, VLLMEngine
from agenthub.agents._vllm_compat import WeightSource
from agenthub.trainer._weight_sync import EngineClient

pytestmark = pytest.mark.integration
PROMPT = [5, 17, 40, 41, 99, 120]
SAMPLING = SamplingParams(max_tokens=8, temperature=1.0, seed=3)


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


def learn_from(learner: Any, sampled: Any) -> dict[str, Any]:
    """One learner step on one sampled reply to PROMPT (reward 1); the new weights."""
    from agenthub.trainer import TrainBatch

    reply = list(sampled.token_ids)
    learner.step(
        TrainBatch.collate(
            [PROMPT + reply],
            [[0] * len(PROMPT) + [1] * len(reply)],
            [[0.0] * len(PROMPT) + list(sampled.logprobs)],
            [1.0],
        )
    )
    return learner.state_dict()  # type: ignore[no-any-return]


async def check_sync(
    engine: VLLMEngine, model_dir: Path, state: dict[str, Any], sync: Callable[[], Awaitable[Any]]
) -> None:
    """Requests running when `sync()` starts finish on the old weights (the sync waits for
    them); after it the engine samples from `state` under policy version 1."""
    running = [asyncio.create_task(engine.generate(PROMPT, SAMPLING)) for _ in range(3)]
    await asyncio.sleep(0)
    await sync()
    assert {g.policy_version for g in await asyncio.gather(*running)} == {0}

    after = await engine.generate(PROMPT, SAMPLING)
    assert after.policy_version == 1
    expected = transformers_logprobs(model_dir, state, PROMPT, after.token_ids)
    assert list(after.logprobs) == pytest.approx(expected, abs=1e-3)
    old_on_same = transformers_logprobs(model_dir, None, PROMPT, after.token_ids)
    assert list(after.logprobs) != pytest.approx(old_on_same, abs=1e-3), "weights changed"


@pytest.mark.timeout(900)
def test_learner_step_synced_into_vllm_changes_what_it_samples(tiny_model: Path) -> None:
    from agenthub.trainer import Learner, LearnerConfig

    learner = Learner(tiny_model, LearnerConfig(zero_stage=3, lr=5e-2, micro_batch_size=2))

    async def scenario() -> None:
        engine = VLLMEngine(tiny_model, max_model_len=256)
        try:
            before = await engine.generate(PROMPT, SAMPLING)
            assert before.policy_version == 0
            expected = transformers_logprobs(tiny_model, None, PROMPT, before.token_ids)
            assert list(before.logprobs) == pytest.approx(expected, abs=1e-3)

            state = learn_from(learner, before)

            await check_sync(
                engine, tiny_model, state, lambda: engine.update_weights(state, version=1)
            )
            with pytest.raises(ValueError, match="may only grow"):
                await engine.update_weights(state, version=0)
        finally:
            await engine.aclose()

    asyncio.run(scenario())
    # This process's only: a training run beside this test may be in the middle of a sync.
    left = list(Path("/dev/shm").glob(f"agenthub-weights-{os.getpid()}-*"))
    assert not left, "sync files are removed"


@pytest.mark.timeout(900)
def test_learner_broadcasts_its_zero3_weights_into_vllm_over_gloo(tied_model: Path) -> None:
    from agenthub.agents._vllm_compat import trainer_weight_transfer
    from agenthub.agents._weight_transfer import BACKEND, GlooTrainerInitInfo, register
    from agenthub.trainer import Learner, LearnerConfig
    from agenthub.trainer._weight_sync import EngineClient, LearnerSource, _free_port

    learner = Learner(tied_model, LearnerConfig(zero_stage=3, lr=5e-2, micro_batch_size=2))
    register()

    async def scenario() -> None:
        engine = VLLMEngine(
            tied_model, max_model_len=256, weight_transfer=BACKEND, weight_update="drain"
        )
        try:
            assert engine.transfer_ranks == 1
            client = EngineClient(engine, asyncio.get_running_loop())
            info = GlooTrainerInitInfo(
                master_address="127.0.0.1", master_port=_free_port(), world_size=2, rank=0
            )
            # Buckets of a few parameters: each gathered from the ZeRO-3 shards in turn.
            source = LearnerSource(learner.policy, zero3=True, bucket_bytes=40_000)
            sender = await asyncio.to_thread(
                trainer_weight_transfer, info, client=client, source=source
            )
            before = await engine.generate(PROMPT, SAMPLING)
            state = learn_from(learner, before)

            client.version = 1
            await check_sync(
                engine, tied_model, state, lambda: asyncio.to_thread(sender.send_weights)
            )

            client.version = 0
            with pytest.raises(ValueError, match="may only grow"):
                await asyncio.to_thread(sender.send_weights)
            assert (await engine.generate(PROMPT, SAMPLING)).policy_version == 1, "still serving"
            sender.shutdown()

            # A broadcast cut off part-way (here the trainer stops sending and closes the
            # group: the worker's receive fails, as when a peer dies) leaves the engine with
            # some layers loaded, one in part: it holds requests rather than serve them,
            # until a new group sends it a whole round.
            cut = GlooTrainerInitInfo(
                master_address="127.0.0.1",
                master_port=_free_port(),
                world_size=2,
                rank=0,
                chunk_bytes=1,  # the worker loads each tensor as it comes
                timeout_s=10.0,
            )
            watched = Watched(engine, asyncio.get_running_loop())
            sender = await asyncio.to_thread(
                trainer_weight_transfer, cut, client=watched, source=Halting(source)
            )
            watched.version = 2
            with pytest.raises(ValueError, match="ended before"):
                await asyncio.to_thread(sender.send_weights)
            sender.shutdown()
            held = asyncio.create_task(engine.generate(PROMPT, SAMPLING))
            assert watched.received is not None
            with pytest.raises(Exception, match="(?i)connection|closed|timed out|peer"):
                await asyncio.wait_for(asyncio.wrap_future(watched.received), timeout=60)
            with pytest.raises(EngineError, match="weight sync failed part-way"):
                await engine.start_weight_update(2)  # not on the group that failed
            assert not held.done()
            info = GlooTrainerInitInfo(
                master_address="127.0.0.1", master_port=_free_port(), world_size=2, rank=0
            )
            sender = await asyncio.to_thread(
                trainer_weight_transfer, info, client=client, source=source
            )
            client.version = 2
            await asyncio.to_thread(sender.send_weights)
            repaired = await held
            assert repaired.policy_version == 2
            expected = transformers_logprobs(tied_model, state, PROMPT, repaired.token_ids)
            assert list(repaired.logprobs) == pytest.approx(expected, abs=1e-3), "whole weights"
            sender.shutdown()
        finally:
            await engine.aclose()

    asyncio.run(scenario())


class Halting(WeightSource):
    """`source`'s weights, ending right after the first `q_proj` (loaded by the workers while
    the `k_proj` and `v_proj` fused with it are not)."""

    def __init__(self, source: WeightSource) -> None:
        self.source = source

    def metadata(self) -> list[Any]:
        return self.source.metadata()  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for name, tensor in self.source:
            yield name, tensor
            if "q_proj" in name:
                return


class Watched(EngineClient):
    """The engine's client, keeping the receive of the round under way."""

    received: concurrent.futures.Future[None] | None = None

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self.received = asyncio.run_coroutine_threadsafe(
            self.engine.receive_weights(update_info), self.loop
        )
        self.received.result()


def _split_point(got: list[float], old: list[float], new: list[float]) -> int | None:
    """The k at which `got` stops matching `old` and matches `new` from there on, if any."""
    for k in range(len(got) + 1):
        if got[:k] == pytest.approx(old[:k], abs=1e-3) and got[k:] == pytest.approx(
            new[k:], abs=1e-3
        ):
            return k
    return None


@pytest.mark.timeout(600)
def test_a_reply_in_flight_across_a_keep_update_goes_on_from_the_new_weights(
    tied_model: Path,
) -> None:
    """`weight_update="keep"`: the round does not wait for the reply in flight, which is
    neither aborted nor cut short; its tokens up to the update are the old weights' samples and
    those after it the new weights' (their logprobs equal transformers' on a clean forward of
    the new weights: its KV was recomputed), and it counts as the older version."""
    import torch
    from transformers import AutoModelForCausalLM

    from agenthub.agents._vllm_compat import trainer_weight_transfer
    from agenthub.agents._weight_transfer import BACKEND, GlooTrainerInitInfo, register
    from agenthub.trainer._weight_sync import EngineClient, LearnerSource, _free_port

    register()
    policy = AutoModelForCausalLM.from_pretrained(str(tied_model), torch_dtype=torch.float32)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    new_state = {k: v.clone() for k, v in policy.state_dict().items()}
    long = SamplingParams(max_tokens=300, temperature=1.0, seed=5)

    async def scenario() -> tuple[Any, int, int]:
        engine = VLLMEngine(
            tied_model, max_model_len=512, weight_transfer=BACKEND, weight_update="keep"
        )
        try:
            client = EngineClient(engine, asyncio.get_running_loop())
            info = GlooTrainerInitInfo(
                master_address="127.0.0.1", master_port=_free_port(), world_size=2, rank=0
            )
            source = LearnerSource(policy, zero3=False)
            sender = await asyncio.to_thread(
                trainer_weight_transfer, info, client=client, source=source
            )
            running = asyncio.create_task(engine.generate(PROMPT, long))
            await asyncio.sleep(0.3)  # decoding
            assert not running.done(), "the reply must be in flight when the update starts"
            client.version = 1
            await asyncio.to_thread(sender.send_weights)
            in_flight_after = int(not running.done())
            reply = await running
            after = await engine.generate(PROMPT, SAMPLING)
            assert after.policy_version == engine.policy_version == 1
            sender.shutdown()
            return reply, in_flight_after, engine.spanning_generations
        finally:
            await engine.aclose()

    reply, in_flight_after, spanning = asyncio.run(scenario())
    assert in_flight_after == 1, "the round returned before the reply finished"
    assert spanning == 1
    assert reply.policy_version == 0, "counted as the oldest version that sampled it"
    assert reply.finish_reason != "abort"
    if reply.finish_reason == "length":
        assert len(reply.token_ids) == long.max_tokens, "not cut short"
    old = transformers_logprobs(tied_model, None, PROMPT, reply.token_ids)
    new = transformers_logprobs(tied_model, new_state, PROMPT, reply.token_ids)
    k = _split_point(list(reply.logprobs), old, new)
    assert k is not None, "the reply's logprobs are the old weights', then the new ones'"
    assert 0 < k < len(reply.token_ids), f"both versions sampled it ({k} old tokens)"
