"""vLLM on a CUDA GPU (`make test-gpu`; deselected elsewhere): rollout logprobs against a
transformers recomputation, the weight sync GPU to GPU (CUDA IPC into an engine on the
learner's GPU, NCCL into one on a second GPU where there is one), and a colocated engine's
level-2 sleep, after which the weights are reloaded before anything is generated.

The learner's model here is a transformers model on `cuda:0` in bf16, the engine's a vLLM
engine started from the same files; the transfers are agenthub's (`_gpu_transfer`)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the engine needs the train extra")
transformers = pytest.importorskip("transformers", reason="the engine needs the train extra")
pytest.importorskip("vllm", reason="the engine needs the train extra")

from agenthub.agents import SamplingParams, VLLMEngine  # noqa: E402
from agenthub.trainer._gpu_transfer import IpcSender, NcclSender  # noqa: E402
from agenthub.trainer._weight_sync import EngineClient, LearnerSource, _free_port  # noqa: E402
from tests.tiny_model import build_tokenizer  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.gpu, pytest.mark.timeout(900)]

# The engine computes in bf16 (8 bits of mantissa) with its own kernels, transformers in fp32
# from the same bf16 weights: a token's logprob through 4 layers differs by a few hundredths
# of a nat; a wrong weight, a stale one, or a position off by one moves it by whole nats.
BF16_LOGPROB_TOLERANCE = 0.1
PROMPT = [5, 17, 40, 9, 33, 2, 61]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not torch.cuda.is_available():
        pytest.fail("the GPU tests need a CUDA device: run them with `make test-gpu` on one")
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    out = tmp_path_factory.mktemp("gpu-engine") / "model"
    build_tokenizer(out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    return out


def _learner(model_dir: Path, device: str = "cuda:0") -> Any:
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    return model.to(device).eval()


def _engine(model_dir: Path, backend: str, gpu: int = 0, **options: Any) -> VLLMEngine:
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)  # the engine core's process sees this one
    try:
        return VLLMEngine(
            model_dir,
            weight_transfer=backend,
            dtype="bfloat16",
            max_model_len=512,
            gpu_memory_utilization=0.25,
            enforce_eager=True,
            **options,
        )
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES")
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


def _recomputed(model: Any, prompt: list[int], reply: tuple[int, ...]) -> list[float]:
    """Each reply token's logprob under `model` (fp32 softmax of its logits, temperature 1)."""
    ids = torch.tensor([prompt + list(reply)], device=model.device)
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return logprobs.gather(1, torch.tensor(reply, device=model.device)[:, None])[:, 0].tolist()


def _greedy(model: Any, prompt: list[int], tokens: int) -> tuple[int, ...]:
    ids = torch.tensor([prompt], device=model.device)
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=tokens, do_sample=False, min_new_tokens=tokens)
    return tuple(out[0, len(prompt) :].tolist())


async def _served_like(engine: VLLMEngine, model: Any) -> None:
    """The engine's sampled tokens carry the logprobs `model` gives them, and its greedy reply
    is `model`'s."""
    sampled = await engine.generate(PROMPT, SamplingParams(max_tokens=16, temperature=1.0, seed=3))
    expected = _recomputed(model, PROMPT, sampled.token_ids)
    for got, want in zip(sampled.logprobs, expected, strict=True):
        assert abs(got - want) <= BF16_LOGPROB_TOLERANCE, (sampled.logprobs, expected)
    greedy = await engine.generate(PROMPT, SamplingParams(max_tokens=8, temperature=0.0))
    assert greedy.token_ids == _greedy(model, PROMPT, len(greedy.token_ids))


def _perturb(model: Any, seed: int) -> None:
    generator = torch.Generator(device=model.device).manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=generator, device=p.device, dtype=torch.float32)
            p.add_(noise.to(p.dtype) * 0.05)


@pytest.fixture
def learner(model_dir: Path) -> Iterator[Any]:
    model = _learner(model_dir)
    yield model
    del model
    torch.cuda.empty_cache()


def test_rollout_logprobs_equal_a_transformers_recomputation(model_dir: Path, learner: Any) -> None:
    async def run() -> None:
        engine = _engine(model_dir, "ipc")
        try:
            await _served_like(engine, learner)
        finally:
            await engine.aclose()

    asyncio.run(run())


def test_after_an_ipc_sync_the_engine_serves_the_learners_weights(
    model_dir: Path, learner: Any
) -> None:
    async def run() -> None:
        engine = _engine(model_dir, "ipc")
        try:
            client = EngineClient(engine, asyncio.get_running_loop())
            source = LearnerSource(learner, zero3=False, bucket_bytes=2**20)  # many buckets
            sender = await asyncio.to_thread(IpcSender.open, client, source)
            for version in (1, 2):
                _perturb(learner, seed=version)
                client.version = version
                await asyncio.to_thread(sender.send_weights)
                assert engine.policy_version == version
                await _served_like(engine, learner)
        finally:
            await engine.aclose()

    asyncio.run(run())


def test_after_an_nccl_sync_an_engine_on_another_gpu_serves_the_learners_weights(
    model_dir: Path, learner: Any
) -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL between GPUs needs two; this machine has one")

    async def run() -> None:
        engine = _engine(model_dir, "nccl", gpu=1)
        try:
            client = EngineClient(engine, asyncio.get_running_loop())
            rendezvous = {"master_address": "127.0.0.1", "master_port": _free_port()}
            rendezvous["world_size"] = 2
            source = LearnerSource(learner, zero3=False, bucket_bytes=2**20)
            sender = await asyncio.to_thread(NcclSender.open, client, source, rendezvous)
            _perturb(learner, seed=7)
            client.version = 1
            await asyncio.to_thread(sender.send_weights)
            await _served_like(engine, learner)
            sender.shutdown()
        finally:
            await engine.aclose()

    asyncio.run(run())


def test_a_colocated_engine_woken_from_level_2_serves_the_weights_sent_into_it(
    model_dir: Path, learner: Any
) -> None:
    from agenthub.trainer._colocate import GpuTurns

    async def run() -> None:
        engine = _engine(model_dir, "ipc", enable_sleep_mode=True)
        try:
            client = EngineClient(engine, asyncio.get_running_loop())
            sender = await asyncio.to_thread(
                IpcSender.open, client, LearnerSource(learner, zero3=False)
            )
            turns = GpuTurns(engine)
            for version in (1, 2, 3):
                free_before = torch.cuda.mem_get_info()[0]

                async def step(version: int = version, free_before: int = free_before) -> int:
                    # The engine's memory is free for the learner meanwhile.
                    assert torch.cuda.mem_get_info()[0] > free_before
                    _perturb(learner, seed=10 + version)
                    return version

                async def sync(version: int = version) -> None:
                    client.version = version
                    await asyncio.to_thread(sender.send_weights)

                assert await turns.learner_turn(step, sync) == version
                assert engine.policy_version == version
                await _served_like(engine, learner)
        finally:
            await engine.aclose()

    asyncio.run(run())
