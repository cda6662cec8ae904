"""The default model's tokenizer: byte-level BPE trained on the demonstrations, Qwen-style chat
template, saved as a `PreTrainedTokenizerFast` that transformers and vLLM both load."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["BOS", "CHAT_TEMPLATE", "EOS", "PAD", "SPECIAL_TOKENS", "train_tokenizer"]

PAD = "<|endoftext|>"
BOS = "<|im_start|>"
EOS = "<|im_end|>"
SPECIAL_TOKENS = (PAD, BOS, EOS)

# Qwen2's chat format: every message, whatever its role (system, user, assistant, tool), is
# `<|im_start|>ROLE\nCONTENT<|im_end|>\n`; a generation prompt opens an assistant message. Tools,
# when given, open the conversation in a system message (after its own system text, if the
# conversation starts with one) as one JSON schema per line, with how to call them: the
# `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` form `agenthub.tools` reads.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0]['role'] == 'system' %}"
    "{{- messages[0]['content'] + '\\n\\n' }}"
    "{%- endif %}"
    "{{- 'You can call these tools, each described by a JSON schema:\\n<tools>\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{{- '\\n' }}{%- endfor %}"
    '{{- \'</tools>\\nTo call one, write <tool_call>{"name": NAME, "arguments": '
    "{...}}</tool_call>; its result comes back as a tool message.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (tools and loop.first and message['role'] == 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Qwen2's pre-tokenizer split: single digits (so numbers are spelled digit by digit, which
# arithmetic needs), words with their leading space, punctuation runs, newline runs.
_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: Path) -> Any:
    """Train the tokenizer on `texts`, save it into `out_dir` and return it (a
    `transformers.PreTrainedTokenizerFast`). Training is deterministic for the same texts."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    fast: Any = PreTrainedTokenizerFast
    tokenizer = fast(
        tokenizer_object=core,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=None,
        bos_token=None,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
        chat_template=CHAT_TEMPLATE,
    )
    tokenizer.save_pretrained(out_dir)
    _portable_config(out_dir / "tokenizer_config.json")
    return tokenizer


def _portable_config(path: Path) -> None:
    # transformers 5 writes its own class name and keeps the chat template in a separate file;
    # older transformers and other loaders read both from tokenizer_config.json.
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["chat_template"] = CHAT_TEMPLATE
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
