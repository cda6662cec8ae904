"""Held-out accuracy of the default model's greedy answers, before and after the warm start.

    python benchmarks/default_model_accuracy.py [--env ID ...] [--tasks N] [--split held_out]

Builds the default model twice into a temporary directory (without and with the supervised warm
start; same tokenizer and initialisation), answers N held-out tasks of each environment greedily
with transformers, and scores each answer with the environment itself (`reset`, then `step` with
the answer; a reward of 1 counts as correct). The last line is the accuracy after the warm start
over all environments, then before it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
from pathlib import Path
from typing import Any

import agenthub
from agenthub.agents.default_model import DefaultModelConfig, build_default_model


def greedy_answers(model_dir: Path, tasks: list[agenthub.Task], max_new_tokens: int) -> list[str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    answers: list[str] = []
    for start in range(0, len(tasks), 16):
        prompts = [
            tokenizer.apply_chat_template(
                [m.model_dump() for m in t.messages()], add_generation_prompt=True, tokenize=False
            )
            for t in tasks[start : start + 16]
        ]
        batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
        new = out[:, batch["input_ids"].shape[1] :]
        answers += tokenizer.batch_decode(new, skip_special_tokens=True)
    return answers


async def score(env_id: str, tasks: list[agenthub.Task], answers: list[str]) -> list[float]:
    env = agenthub.make(env_id)
    rewards = []
    try:
        for task, answer in zip(tasks, answers, strict=True):
            await env.reset(task, seed=0)
            rewards.append((await env.step(answer)).reward)
    finally:
        await env.aclose()
    return rewards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", dest="env_ids", action="append")
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--split", default="held_out")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    args = parser.parse_args()
    config = (
        DefaultModelConfig(env_ids=tuple(args.env_ids)) if args.env_ids else DefaultModelConfig()
    )
    held_out = {
        e: list(itertools.islice(agenthub.make(e).tasks(args.split), args.tasks))
        for e in config.env_ids
    }
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, steps in (("before", 0), ("after", config.sft_steps)):
            model = build_default_model(
                Path(tmp) / name, config.model_copy(update={"sft_steps": steps})
            )
            for env_id, tasks in held_out.items():
                answers = greedy_answers(model, tasks, args.max_new_tokens)
                rewards = asyncio.run(score(env_id, tasks, answers))
                correct = sum(r >= 1.0 for r in rewards) / len(rewards)
                results.setdefault(env_id, {})[name] = correct
                print(f"{env_id:>12} {name:>6} warm start: {correct:.3f} ({len(tasks)} tasks)")
                print(f"    e.g. {answers[0]!r}")
    total: dict[str, Any] = {
        k: sum(r[k] for r in results.values()) / len(results) for k in ("after", "before")
    }
    print(f"held-out accuracy after warm start {total['after']:.3f} (before {total['before']:.3f})")


if __name__ == "__main__":
    main()
