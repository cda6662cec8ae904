"""Chat templates for token-in-token-out episodes: render only what is new, never the history."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agenthub._tracebacks import described
from agenthub._types import Message
from agenthub.agents._errors import ChatTemplateError

__all__ = ["ChatTokenizer"]

# A stand-in conversation that new messages are rendered after: a user turn, then an assistant
# reply whose text is a sentinel. In the rendering of `_BASE + new`, what follows the reply's
# text and the template's closing of it is exactly the text the template adds for `new` (role
# headers, separators, the generation prompt), including anything it only emits after earlier
# turns, without depending on how the real history would render. How the template dresses the
# stand-in reply itself does not matter (Qwen3 gives the last reply an empty think block and
# drops it once more messages follow): the real reply's tokens are the ones sampled.
_SENTINEL = "\u2063agenthub-reply\u2063"
_BASE = [Message(role="user", content="x"), Message(role="assistant", content=_SENTINEL)]


class ChatTokenizer:
    """A Hugging Face tokenizer, used so that history is never re-tokenized.

    - `encode_prompt(messages, tools)`: the opening of an episode, rendered by the chat template
      with the assistant generation prompt (and the tools the model may call, if any).
    - `encode_followup(messages, tools)`: only the tokens the template adds for new messages
      after a finished assistant turn, ending with the generation prompt.
    - `closing_ids`: the tokens the template writes after an assistant message's content (for
      ChatML, `<|im_end|>` and a newline). A generation that stopped on the end-of-turn token
      already holds the first of them; one cut off by length holds none.
    - `encode_text(text)`: raw text, for text-completion prompts and observations.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))
        eos = tokenizer.eos_token_id
        stops = {eos} if isinstance(eos, int) else set()
        self.closing_ids: tuple[int, ...] = ()
        self._closing = ""
        self._user_texts: dict[str, str] = {}
        if self.has_chat_template:
            self._closing = self._closing_text()
            self.closing_ids = tuple(self.encode_text(self._closing))
            special = set(tokenizer.all_special_ids)
            if self.closing_ids and self.closing_ids[0] in special:
                stops.add(self.closing_ids[0])
        self.stop_token_ids: tuple[int, ...] = tuple(sorted(stops))
        """End-of-sequence and end-of-turn tokens: a generation ends on any of them."""

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ChatTokenizer:
        """Load the tokenizer saved in a model directory."""
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(path)))

    def render(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool,
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> str:
        if not self.has_chat_template:
            raise ChatTemplateError(
                "the tokenizer has no chat template; give text prompts and text observations, "
                "or use a tokenizer whose tokenizer_config.json has a chat_template"
            )
        try:
            text = self.tokenizer.apply_chat_template(
                [m.model_dump() for m in messages],
                tools=[dict(t) for t in tools] or None,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
            )
        except Exception as exc:  # jinja's TemplateError, or whatever the template raises
            roles = [m.role for m in messages if not any(m is base for base in _BASE)]
            raise ChatTemplateError(
                f"the model's chat template cannot render messages with roles {roles}: "
                f"{described(exc)}; send roles the template takes (many take only "
                "system, user and assistant, or want them to alternate)"
            ) from exc
        assert isinstance(text, str)
        return text

    def encode_text(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return list(ids)

    def encode_prompt(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()
    ) -> list[int]:
        # The template writes any BOS token itself, so none is added when encoding.
        text = self.render(messages, add_generation_prompt=True, tools=tools)
        _check_kept(messages, text)
        if tools:
            self._check_tools_shown(tools)
        return self.encode_text(text)

    def encode_followup(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()
    ) -> list[int]:
        # Rendered with the episode's tools too: some templates place them by the messages.
        full = self.render([*_BASE, *messages], add_generation_prompt=True, tools=tools)
        reply = full.find(_SENTINEL)
        after = full[reply + len(_SENTINEL) :]
        if reply < 0 or not full.startswith(self._user_text(tools)):
            raise ChatTemplateError(
                "the chat template renders earlier turns differently once new messages are "
                f"added ({[m.role for m in messages]}), so they cannot be appended token by "
                "token; use a template that only appends"
            )
        if not after.startswith(self._closing):
            raise ChatTemplateError(
                "the chat template ends an assistant reply differently once new messages "
                f"({[m.role for m in messages]}) follow it ({after[:40]!r} instead of "
                f"{self._closing!r}), so they cannot be appended token by token"
            )
        added = after[len(self._closing) :]
        _check_kept(messages, added)
        return self.encode_text(added)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of generated tokens, without special tokens (what the env is given)."""
        text = self.tokenizer.decode(list(ids), skip_special_tokens=True)
        assert isinstance(text, str)
        return text

    def decode_all(self, ids: Sequence[int]) -> str:
        """The text of any tokens with special tokens kept (what a `Transcript` shows)."""
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False)
        assert isinstance(text, str)
        return text

    def missing_closing(self, generated: Sequence[int]) -> list[int]:
        """The closing tokens a finished assistant turn still lacks: all of them after a
        generation cut off by length, the rest after one that ended on end-of-turn."""
        closing = self.closing_ids
        for have in range(min(len(closing), len(generated)), 0, -1):
            if tuple(generated[-have:]) == closing[:have]:
                return list(closing[have:])
        return list(closing)

    def _user_text(self, tools: Sequence[Mapping[str, Any]]) -> str:
        """The stand-in user turn as the template renders it on its own (with any system
        text or tools it adds first): a follow-up rendering must start with it unchanged.
        Kept per set of tools: episodes of one env share it."""
        key = json.dumps(list(tools), sort_keys=True)
        if key not in self._user_texts:
            if len(self._user_texts) >= 256:  # tools chosen per task: do not keep them all
                self._user_texts.clear()
            self._user_texts[key] = self.render(_BASE[:1], add_generation_prompt=False, tools=tools)
        return self._user_texts[key]

    def _check_tools_shown(self, tools: Sequence[Mapping[str, Any]]) -> None:
        """Refuse a template that does not show the model its tools: one that takes no `tools`
        renders the same text with and without them (or leaves a tool's name out), and the
        model would be trained to call functions it was never told about."""
        text = self._user_text(tools)
        names = [str(t["function"]["name"]) for t in tools]
        if text == self._user_text(()) or not all(name in text for name in names):
            raise ChatTemplateError(
                f"the model's chat template does not show the model the tools {names} (it "
                "renders the conversation without them); use a model whose template takes "
                "`tools` (the default model's does), or describe the tools in the prompt and "
                "leave the env's `tools` empty"
            )

    def _closing_text(self) -> str:
        text = self.render(_BASE, add_generation_prompt=False)
        at = text.find(_SENTINEL)
        if at < 0:
            raise ChatTemplateError(
                "the chat template drops the assistant's reply text, so replies cannot be "
                "appended token by token"
            )
        return text[at + len(_SENTINEL) :]


def _check_kept(messages: Sequence[Message], text: str) -> None:
    """Refuse a rendering that leaves out what a system, user or tool message says: a template
    that knows no `tool` role, say, may skip those messages, and the model would be trained on
    a conversation in which the tool never answered. (An assistant message's text may be
    rewritten, as templates that drop earlier reasoning do.)"""
    for message in messages:
        content = message.content.strip()
        if message.role != "assistant" and content and content not in text:
            raise ChatTemplateError(
                f"the model's chat template leaves out the text of a {message.role!r} message "
                f"({content[:60]!r}), so the model would never see it; send roles the "
                "template renders (many know only system, user and assistant)"
            )
