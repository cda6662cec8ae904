"""The default model's network and its warm start: a small Qwen2 causal LM, trained briefly with
supervised fine-tuning on demonstrations (loss on the response tokens only)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agenthub.agents.default_model._config import DefaultModelConfig
from agenthub.agents.default_model._demos import Demonstration

__all__ = ["EncodedDemo", "encode_demonstrations", "new_model", "supervised_warm_start"]

IGNORE = -100


@dataclass(frozen=True, slots=True)
class EncodedDemo:
    """A demonstration as token ids: the rendered prompt, then the response and `<|im_end|>`."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]


def encode_demonstrations(
    demos: Sequence[Demonstration], tokenizer: Any, max_tokens: int
) -> list[EncodedDemo]:
    """Tokenize each demonstration the way a rollout sees it: the prompt through the chat
    template with a generation prompt, the response as sampled tokens ending in `<|im_end|>`.
    Demonstrations longer than `max_tokens` are left out."""
    encoded = []
    for demo in demos:
        messages = [m.model_dump() for m in demo.messages]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt = tuple(tokenizer.encode(text, add_special_tokens=False))
        response = (*tokenizer.encode(demo.response, add_special_tokens=False),)
        response += (tokenizer.eos_token_id,)
        if len(prompt) + len(response) <= max_tokens:
            encoded.append(EncodedDemo(prompt, response))
    return encoded


def new_model(config: DefaultModelConfig, tokenizer: Any) -> Any:
    """A freshly initialised `Qwen2ForCausalLM`, seeded by `config.seed`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    # A plain dict: transformers' annotations lag the keys its configs accept across versions.
    fields: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.hidden_size // config.num_heads,
        "max_position_embeddings": config.max_position_embeddings,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "bos_token_id": None,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "dtype": "float32",
    }
    torch.manual_seed(config.seed)
    model_class: Any = Qwen2ForCausalLM
    return model_class(Qwen2Config(**fields))


def supervised_warm_start(
    model: Any,
    demos: Sequence[EncodedDemo],
    config: DefaultModelConfig,
    on_step: Callable[[int, float], None],
) -> list[float]:
    """Train `model` for `config.sft_steps` steps of `config.batch_size` demonstrations with
    AdamW (linear warm-up, cosine decay); return the loss of every step. `on_step(step, loss)`
    is called after each step. Same demonstrations and config: same weights."""
    import torch

    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, weight_decay=0.01, betas=(0.9, 0.95)
    )
    warmup = max(1, config.sft_steps // 10)

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, config.sft_steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    lr_schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model.train()
    losses: list[float] = []
    order: list[int] = []
    for step in range(config.sft_steps):
        if len(order) < config.batch_size:
            order += torch.randperm(len(demos), generator=generator).tolist()
        batch = [demos[i] for i in order[: config.batch_size]]
        del order[: config.batch_size]
        input_ids, labels, attention = _collate(batch, model.config.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        lr_schedule.step()
        losses.append(float(loss.item()))
        on_step(step, losses[-1])
    model.eval()
    return losses


def _collate(batch: Sequence[EncodedDemo], pad_id: int) -> tuple[Any, Any, Any]:
    import torch

    width = max(len(d.prompt_ids) + len(d.response_ids) for d in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, demo in enumerate(batch):
        ids = demo.prompt_ids + demo.response_ids
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, len(demo.prompt_ids) : len(ids)] = torch.tensor(demo.response_ids)
        attention[row, : len(ids)] = 1
    return input_ids, labels, attention
