"""A tiny random-weight chat model for tests: a byte-level BPE tokenizer trained in memory,
a ChatML (Qwen-style) chat template and a two-layer Qwen2 model that vLLM loads on CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Qwen2.5-0.5B's shape less its vocabulary, for the random models of the GPU tests and
# benchmarks (`transformers.Qwen2Config(vocab_size=..., **QWEN25_05B_BODY)`).
QWEN25_05B_BODY: dict[str, Any] = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "rope_theta": 1e6,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}

_CORPUS = [
    "You are a helpful assistant.",
    "Count down with me. Start at 3. What is 2 + 2? The answer is 4.",
    "system user assistant tool Hello, world! def f(x): return x * 2",
    "0 1 2 3 4 5 6 7 8 9 (noise) Try again. Correct. Wrong answer.",
]


def build_tokenizer(out: Path, *, pad_token: str | None = "<|endoftext|>") -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_CORPUS * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token=pad_token,
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(out))


def build_model(out: Path, *, layers: int = 2, seed: int = 0, tied: bool = False) -> Path:
    """Save the tokenizer and a random Qwen2 model (head dim 64) under `out`; `tied`: the
    output layer is the input embeddings, as in the embedded default model."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=tied,
        eos_token_id=eos,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    # A larger output layer than the default init gives a peaked, prompt-dependent next-token
    # distribution instead of a nearly uniform one, so replies sometimes end on their own.
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, 0.15)
    model.save_pretrained(str(out), safe_serialization=True)
    GenerationConfig(eos_token_id=eos, pad_token_id=tokenizer.pad_token_id).save_pretrained(
        str(out)
    )
    return out


def build_sequence_classifier(out: Path, *, seed: int = 0) -> Path:
    """Save a random one-label Qwen2 sequence classifier under `out` whose tokenizer and config
    name no pad token, as many base models ship."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForSequenceClassification

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out, pad_token=None)
    torch.manual_seed(seed)
    Qwen2ForSequenceClassification(_reward_config(out, num_labels=1)).save_pretrained(str(out))
    assert AutoTokenizer.from_pretrained(str(out)).pad_token is None
    return out


def build_openrlhf_reward_model(
    out: Path, *, mean: float | None = None, std: float | None = None, seed: int = 0
) -> tuple[Any, Any]:
    """Save a random reward model under `out` in OpenRLHF's layout: the base model's weights
    under `model.`, a bias-free one-output linear as `value_head.weight`, `normalize_reward`
    in config.json (with `mean` and `std` when given). Returns the base model and head."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2Model

    out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(out)
    config = _reward_config(out, normalize_reward=mean is not None)
    if mean is not None:
        config.mean, config.std = mean, std
    torch.manual_seed(seed)
    base, head = Qwen2Model(config).eval(), torch.nn.Linear(config.hidden_size, 1, bias=False)
    weights = {f"model.{k}": v for k, v in base.state_dict().items()}
    save_file(
        {**weights, "value_head.weight": head.weight.detach()}, str(out / "model.safetensors")
    )
    config.save_pretrained(str(out))
    return base, head


def _reward_config(out: Path, **extra: object) -> Any:
    from transformers import AutoTokenizer, Qwen2Config

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=None,
        **extra,
    )
