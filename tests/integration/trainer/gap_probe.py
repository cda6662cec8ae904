"""Episodes sampled by the vLLM engine on the embedded default model, as a learner batch: what
the train/inference gap tests and `benchmarks/train_inference_gap.py` measure the learner on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

QUESTIONS = [f"What is {a} + {b}?" for a in range(3, 9) for b in (4, 7)]


def sample_batch(model: Path, *, samples: int = 2, max_tokens: int = 32, seed: int = 0) -> Any:
    """`samples` replies to each question at temperature 1 from a fresh fp32 CPU engine at
    policy version 0, collated with the engine's logprobs and versions; advantages +1 and -1
    by turns, so that learner steps on it move the policy."""
    from transformers import AutoTokenizer

    from agenthub.agents import SamplingParams, VLLMEngine
    from agenthub.trainer import TrainBatch

    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        for q in QUESTIONS
    ]
    prompts = [tokenizer.encode(t, add_special_tokens=False) for t in texts for _ in range(samples)]

    async def generate() -> list[Any]:
        engine = VLLMEngine(model, max_model_len=512, seed=seed)
        try:
            return await asyncio.gather(
                *(
                    engine.generate(p, SamplingParams(max_tokens=max_tokens, seed=seed + i))
                    for i, p in enumerate(prompts)
                )
            )
        finally:
            await engine.aclose()

    replies = asyncio.run(generate())
    return TrainBatch.collate(
        [p + list(r.token_ids) for p, r in zip(prompts, replies, strict=True)],
        [[0] * len(p) + [1] * len(r.token_ids) for p, r in zip(prompts, replies, strict=True)],
        [[0.0] * len(p) + list(r.logprobs) for p, r in zip(prompts, replies, strict=True)],
        [1.0 if i % 2 == 0 else -1.0 for i in range(len(prompts))],
        policy_versions=[
            [r.policy_version] * (len(p) + len(r.token_ids))
            for p, r in zip(prompts, replies, strict=True)
        ],
    )


def gaps_by_staleness(model: Path, staleness: list[int]) -> dict[int, dict[str, float]]:
    """A fresh fp32 DeepSpeed learner (started before the engine, as in training, where it owns
    the process's torch.distributed group) and a batch sampled at policy version 0; the learner
    steps on that batch again and again, and the metrics of the steps it takes when its policy
    is each of `staleness` versions ahead of the batch's come back."""
    from agenthub.trainer import Learner, LearnerConfig
    from agenthub.trainer._config import DEFAULT_MODEL_LR

    config = LearnerConfig(zero_stage=0, bf16=False, lr=DEFAULT_MODEL_LR, micro_batch_size=8)
    learner = Learner(model, config)
    batch = sample_batch(model)
    out = {}
    for _ in range(max(staleness) + 1):
        behind = learner.steps
        metrics = learner.step(batch)
        if behind in staleness:
            out[behind] = metrics
    return out
