"""One program episode as the endpoint sees it: its calls, split into segments of exact tokens."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from agenthub.agents._chat import ChatTokenizer
from agenthub.agents._endpoint_messages import RequestError, Turn
from agenthub.agents._engine import FinishReason, Generation
from agenthub.agents._errors import ChatTemplateError
from agenthub.agents._session import Session
from agenthub.agents._trajectory import EpisodeError

__all__ = ["EndpointCall", "EndpointEpisode"]


@dataclass(frozen=True, slots=True)
class EndpointCall:
    """One call a program made, exactly as the engine served it: the prompt's token ids, the
    sampled ids with their logprobs, the policy version, and which segment it belongs to."""

    segment: int
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    policy_version: int
    finish_reason: FinishReason


@dataclass
class _Segment:
    """A run of calls that share one token sequence: each call's prompt is the previous
    call's prompt and reply exactly as sampled, followed by only what the program added."""

    session: Session
    kind: Literal["chat", "text"]
    tools: tuple[Mapping[str, Any], ...] = ()
    conversation: list[Turn] = field(default_factory=list)
    text: str | None = None


class EndpointEpisode:
    """The calls of one episode, named by its key in the endpoint's URL.

    A chat request whose messages are the previous request's, then the reply as it was
    returned, then new messages (the append-only agent loop) extends the current segment: only
    the new messages are tokenized, as a follow-up through the chat template. Any other request
    (history dropped, summarised or edited, other tools, a text prompt after chat ones) opens a
    new segment whose prompt is rendered from its messages: a separate training sample that
    shares the episode's reward. Text completions extend the segment when the prompt is the
    previous prompt plus the returned text plus more; a prompt of token ids opens a segment.
    Calls of one episode are served one at a time, in the order they arrive.
    """

    def __init__(self, key: str, chat: ChatTokenizer) -> None:
        self.key = key
        self.chat = chat
        self.segments: list[_Segment] = []
        self.calls: list[EndpointCall] = []
        self.lock = anyio.Lock()
        self.error: EpisodeError | None = None
        self.truncated = False
        self.generate_s = 0.0
        self.seed: int | None = None
        self.opened_at = time.perf_counter()
        self._undo: tuple[int, int, str | None, list[Turn]] | None = None

    def prompt_chat(
        self, turns: Sequence[Turn], tools: tuple[Mapping[str, Any], ...], policy_version: int
    ) -> Session:
        """The session to generate in for a chat request, its prompt ready."""
        current = self.segments[-1] if self.segments else None
        known = len(current.conversation) if current else 0
        if (
            current is not None
            and current.kind == "chat"
            and current.tools == tools
            and len(turns) > known
            and list(turns[:known]) == current.conversation
        ):
            self._keep_undo(current)
            with _unrenderable():
                current.session.add_observation(
                    [t.message() for t in turns[known:]], policy_version
                )
            current.conversation = list(turns)
            return current.session
        with _unrenderable():
            ids = self.chat.encode_prompt([t.message() for t in turns], tools)
        session = Session(self.chat, ids, policy_version, tools=tools)
        return self._open(_Segment(session, "chat", tools, list(turns)))

    def prompt_text(self, prompt: str | list[int], policy_version: int) -> Session:
        """The session to generate in for a text completion, its prompt ready."""
        current = self.segments[-1] if self.segments else None
        text = current.text if current is not None else None
        if isinstance(prompt, str) and current is not None and text and prompt.startswith(text):
            self._keep_undo(current)
            current.session.add_observation(prompt[len(text) :], policy_version)
            current.text = prompt
            return current.session
        if isinstance(prompt, str):
            ids = self.chat.encode_text(prompt)
            segment = _Segment(Session(self.chat, ids, policy_version, chat_template=False), "text")
            segment.text = prompt
        else:
            segment = _Segment(
                Session(self.chat, prompt, policy_version, chat_template=False), "text"
            )
        return self._open(segment)

    def undo_prompt(self) -> None:
        """Take back the last prompt (it left no room to reply): the context it added, or the
        segment it opened."""
        if self._undo is None:
            return
        count, length, text, conversation = self._undo
        if length < 0:
            del self.segments[count - 1 :]
        else:
            segment = self.segments[count - 1]
            segment.session.rollback(length)
            segment.text, segment.conversation = text, conversation
        self._undo = None

    def add_generation(self, generation: Generation, prompt_ids: tuple[int, ...]) -> str:
        """Append the sampled tokens to the current segment as they are; return their text."""
        segment = self.segments[-1]
        text = segment.session.add_generation(generation)
        self.calls.append(
            EndpointCall(
                len(self.segments) - 1,
                prompt_ids,
                generation.token_ids,
                generation.logprobs,
                generation.policy_version,
                generation.finish_reason,
            )
        )
        self._undo = None
        return text

    def add_reply(self, reply: Turn | str) -> None:
        """Remember the reply as the program was given it: the next request must repeat it
        to extend the segment."""
        segment = self.segments[-1]
        if isinstance(reply, Turn):
            segment.conversation.append(reply)
        elif segment.text is not None:
            segment.text += reply

    def fail(self, error: EpisodeError) -> None:
        """Record the first failure the endpoint met serving this episode."""
        if self.error is None:
            self.error = error

    def _keep_undo(self, segment: _Segment) -> None:
        self._undo = (len(self.segments), len(segment.session), segment.text, segment.conversation)

    def _open(self, segment: _Segment) -> Session:
        self.segments.append(segment)
        self._undo = (len(self.segments), -1, None, [])
        return segment.session


@contextmanager
def _unrenderable() -> Iterator[None]:
    """Messages the chat template cannot render are the request's fault: a 400 naming why."""
    try:
        yield
    except ChatTemplateError as exc:
        raise RequestError(str(exc)) from exc
