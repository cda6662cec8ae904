"""`Session`: one episode's token sequence, built token-in-token-out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from agenthub._transcript import Transcript
from agenthub._types import Message, Observation, Task
from agenthub.agents._chat import ChatTokenizer
from agenthub.agents._engine import Generation
from agenthub.agents._errors import ChatTemplateError

__all__ = ["Session"]


class Session:
    """The episode as the trainer will see it: token ids with a loss mask, rollout logprobs and
    the policy version of every token.

    Generated tokens are appended exactly as sampled (mask 1, with the engine's logprobs and
    policy version). Only what the environment adds is tokenized (mask 0, logprob 0.0): chat
    messages through the chat template as a follow-up to the conversation so far, raw text as
    text. Nothing already in the sequence is ever re-tokenized.
    """

    def __init__(
        self,
        chat: ChatTokenizer,
        prompt_ids: list[int],
        policy_version: int,
        *,
        chat_template: bool = True,
        tools: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self.chat = chat
        self.chat_template = chat_template
        self.tools = tools
        self.tokens: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self.policy_versions: list[int] = []
        self.generated_tokens = 0
        self.prompt_length = len(prompt_ids)
        self._open_turn: tuple[int, ...] | None = None
        self._finish_reason: Literal["stop", "length"] = "stop"
        self._append_context(prompt_ids, policy_version)

    @classmethod
    def start(
        cls,
        chat: ChatTokenizer,
        task: Task,
        observation: Observation,
        *,
        chat_template: bool = True,
        policy_version: int = 0,
        tools: Sequence[Mapping[str, Any]] = (),
        system_prompt: str | None = None,
    ) -> Session:
        """Open an episode on `task` followed by the environment's first observation.

        With `chat_template`, the task's prompt (text becomes one user message), led by
        `system_prompt` where it has no system message of its own, and any first messages are
        rendered through the chat template with the assistant generation prompt and the `tools`
        the model may call; without it the prompt must be text and is tokenized as is.
        """
        if chat_template:
            messages = task.messages(system_prompt)
            if isinstance(observation, list):
                messages += observation
            ids = chat.encode_prompt(messages, tools)
        elif tools:
            raise ChatTemplateError(
                f"the env offers tools {[t['function']['name'] for t in tools]} but the chat "
                "template, which shows them to the model, is turned off; turn it on, or "
                "describe the tools in the prompt and leave the env's `tools` empty"
            )
        elif system_prompt is not None:
            raise ChatTemplateError(
                "the env sets a system_prompt but the chat template, which places it, is "
                "turned off; turn it on, or put the instructions in the text prompt"
            )
        elif isinstance(observation, list) and observation:
            raise ChatTemplateError(
                f"the env answered reset on task {task.id!r} with chat messages but the chat "
                "template is turned off; turn it on, or have the env return text"
            )
        elif isinstance(task.prompt, str):
            ids = chat.encode_text(task.prompt)
        else:
            raise ChatTemplateError(
                f"task {task.id!r} has a chat prompt but the chat template is turned off; "
                "turn it on or give text prompts"
            )
        if isinstance(observation, str):
            ids += chat.encode_text(observation)
        return cls(chat, ids, policy_version, chat_template=chat_template, tools=tools)

    def add_generation(self, generation: Generation) -> str:
        """Append the sampled tokens as they are; return their text (the env's action)."""
        ids = generation.token_ids
        self.tokens += ids
        self.loss_mask += [1] * len(ids)
        self.logprobs += generation.logprobs
        self.policy_versions += [generation.policy_version] * len(ids)
        self.generated_tokens += len(ids)
        self._open_turn = ids
        self._finish_reason = "length" if generation.finish_reason == "length" else "stop"
        return self.chat.decode(ids)

    def transcript(self) -> Transcript:
        """The sequence so far, for `agenthub.transcript()` while the env steps the last reply."""
        return Transcript(
            tuple(self.tokens), self.prompt_length, self._finish_reason, self.chat.decode_all
        )

    def add_observation(self, observation: Observation, policy_version: int) -> None:
        """Append what the environment answered, ready for the next generation.

        Chat messages close the model's turn with whatever closing tokens the template writes
        and the sample lacked (all of them after a length cut-off), then follow with the new
        messages and the generation prompt. Raw text is appended as text.
        """
        if isinstance(observation, str):
            self._append_context(self.chat.encode_text(observation), policy_version)
            return
        if observation and not self.chat_template:
            raise ChatTemplateError(
                "the env answered with chat messages but the chat template is turned off; "
                "turn it on, or have the env answer with text"
            )
        ids: list[int] = []
        if self._open_turn is not None:
            ids += self.chat.missing_closing(self._open_turn)
        ids += self.chat.encode_followup(list[Message](observation), self.tools)
        self._append_context(ids, policy_version)

    def rollback(self, length: int) -> None:
        """Drop everything after the first `length` tokens (an observation that did not fit)."""
        for seq in (self.tokens, self.loss_mask, self.logprobs, self.policy_versions):
            del seq[length:]
        self._open_turn = None

    def _append_context(self, ids: list[int], policy_version: int) -> None:
        self.tokens += ids
        self.loss_mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.policy_versions += [policy_version] * len(ids)
        self._open_turn = None

    def __len__(self) -> int:
        return len(self.tokens)
