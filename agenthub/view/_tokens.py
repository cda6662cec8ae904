"""Where each token of an episode came from, and its text, as the REPL's `:tokens` shows them."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agenthub._types import Message
from agenthub.agents import ChatTemplateError, ChatTokenizer
from agenthub.agents.default_model import default_cache_dir
from agenthub.view._tokenizer_file import TokenizerFile

__all__ = ["Segment", "TokenKind", "TokenizerLookup", "segments", "token_kinds"]

TokenKind = Literal["prompt", "env", "model", "human"]
"""The REPL's kinds: the opening prompt, a later env message, a model sample (loss mask 1), or
a reply a person typed (loss mask 0 in the reply's place: the model did not sample it)."""


@dataclass(frozen=True)
class Segment:
    """A run of tokens of one kind: `tokens[start:end]`."""

    kind: TokenKind
    start: int
    end: int


def token_kinds(
    tokens: Sequence[int], loss_mask: Sequence[int], chat: ChatTokenizer | None
) -> list[TokenKind]:
    """Each token's kind. Mask 1 is the model's. A mask-0 run is a typed reply when it stands
    where a reply stands (right after the chat template's generation prompt) and runs through
    the first stop token; without a chat tokenizer only the prompt (everything before the first
    sample) and the env's tokens are told apart."""
    n = len(tokens)
    opening = _generation_prompt(chat) if chat is not None else ()
    stops = set(chat.stop_token_ids) if chat is not None else set()
    first_sample = next((i for i, m in enumerate(loss_mask) if m == 1), n)
    prompt_end = min(first_sample, _end_of(tokens, opening, 0) or n)
    kinds: list[TokenKind] = ["prompt"] * prompt_end
    i = prompt_end
    while i < n:
        if loss_mask[i] == 1:
            kinds.append("model")
            i += 1
        elif opening and _after(tokens, opening, i) and (i == 0 or kinds[i - 1] != "human"):
            end = i
            while end < n and loss_mask[end] == 0:
                end += 1
                if tokens[end - 1] in stops:
                    break
            kinds += ["human"] * (end - i)
            i = end
        else:
            kinds.append("env")
            i += 1
    return kinds


def segments(kinds: Sequence[TokenKind]) -> list[Segment]:
    found: list[Segment] = []
    for i, kind in enumerate(kinds):
        if found and found[-1].kind == kind:
            found[-1] = Segment(kind, found[-1].start, i + 1)
        else:
            found.append(Segment(kind, i, i + 1))
    return found


def _end_of(tokens: Sequence[int], pattern: Sequence[int], start: int) -> int | None:
    """Where the first `pattern` at or after `start` ends, None if there is none."""
    if not pattern:
        return None
    k = len(pattern)
    first = pattern[0]
    for i in range(start, len(tokens) - k + 1):
        if tokens[i] == first and list(tokens[i : i + k]) == list(pattern):
            return i + k
    return None


def _after(tokens: Sequence[int], pattern: Sequence[int], i: int) -> bool:
    k = len(pattern)
    return i >= k and list(tokens[i - k : i]) == list(pattern)


@functools.lru_cache(maxsize=8)
def _generation_prompt(chat: ChatTokenizer) -> tuple[int, ...]:
    """The tokens the chat template writes to open the assistant's reply (ChatML's
    `<|im_start|>assistant\\n`); none without a chat template."""
    if not chat.has_chat_template:
        return ()
    messages = [Message(role="user", content="x")]
    try:
        full = chat.render(messages, add_generation_prompt=True)
        bare = chat.render(messages, add_generation_prompt=False)
    except ChatTemplateError:
        return ()
    if not full.startswith(bare) or full == bare:
        return ()
    return tuple(chat.encode_text(full[len(bare) :]))


class TokenizerLookup:
    """Finds and loads the tokenizer of a run's model, once per directory: `model/` in a
    training run (the policy it exported), the model directory a run names, or the newest
    cached build of the embedded default. It is read from `tokenizer.json` with the
    `tokenizers` library, so the server never imports transformers or torch. Token ids are
    shown when none can be loaded, with the reason."""

    def __init__(self, override: Path | None = None) -> None:
        self.override = override
        self._loaded: dict[Path, ChatTokenizer] = {}
        self._lock = threading.Lock()

    def find(self, run_dir: Path | None, model: str | None) -> tuple[ChatTokenizer | None, str]:
        """The tokenizer, or None and why not."""
        candidates = [self.override] if self.override else []
        if run_dir is not None:
            candidates.append(run_dir / "model")
        if model and model != "default":
            candidates.append(Path(model))
        elif model == "default" or model is None:
            candidates += sorted(
                default_cache_dir().glob("default-*"),
                key=lambda p: p.stat().st_mtime,
                reverse=True,
            )
        for directory in candidates:
            if directory is None or not (directory / "tokenizer_config.json").is_file():
                continue
            return self._load(directory)
        return None, (
            f"no tokenizer found for model {model!r} (looked in {', '.join(map(str, candidates))}"
            "); tokens are shown as ids. Pass --tokenizer DIR (a model directory) to decode them"
        )

    def _load(self, directory: Path) -> tuple[ChatTokenizer | None, str]:
        with self._lock:  # once, also when a page asks while the preload is loading it
            return self._load_once(directory)

    def _load_once(self, directory: Path) -> tuple[ChatTokenizer | None, str]:
        if directory in self._loaded:
            return self._loaded[directory], ""
        try:
            chat = ChatTokenizer(TokenizerFile.load(directory))
        except ImportError as exc:
            return None, (
                f"{exc.name or 'tokenizers'} is not installed, so tokens are shown as ids; "
                "install agenthub[view] to decode them"
            )
        except (OSError, ValueError, ChatTemplateError) as exc:  # TokenizerFileError too
            return None, f"the tokenizer in {directory} does not load ({exc}); tokens shown as ids"
        self._loaded[directory] = chat
        return chat, ""


def pieces(chat: ChatTokenizer | None, tokens: Sequence[int]) -> list[str]:
    """Each token's text, special tokens kept (the REPL's `:tokens`); `#id` without a
    tokenizer."""
    if chat is None:
        return [f"#{t}" for t in tokens]
    unique = sorted(set(tokens))
    texts = chat.tokenizer.batch_decode([[t] for t in unique], skip_special_tokens=False)
    by_id = dict(zip(unique, texts, strict=True))
    return [by_id[t] for t in tokens]
