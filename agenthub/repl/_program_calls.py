"""An agent program's calls to the model, shown in the REPL as the engine serves them."""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Console
from rich.text import Text

from agenthub._tracebacks import described
from agenthub.agents import (
    ChatTokenizer,
    EndpointEpisode,
    EngineError,
    Generation,
    InferenceEngine,
    SamplingParams,
)
from agenthub.agents._endpoint_messages import Turn, reply_turn
from agenthub.repl._render import show_generation

__all__ = ["ShownCalls"]


class ShownCalls(InferenceEngine):
    """The REPL's engine as a program's calls reach it through the endpoint, each call shown
    on the console while it is served: the tokens its prompt adds to the episode (the whole
    prompt when it opens a segment), then the reply and the tool calls the program gets.

    Which segment a call belongs to is the endpoint's decision, read from the episode it
    records (`watch`, `ProgramPlayer`'s hook), never guessed from the tokens: a prompt of
    token ids, or a history sent back edited, opens a segment even where its tokens happen to
    extend the last call's.
    """

    def __init__(self, engine: InferenceEngine, chat: ChatTokenizer, console: Console) -> None:
        self.engine = engine
        self.chat = chat
        self.console = console
        self.episode: EndpointEpisode | None = None
        self._segment = -1  # the segment of the last call served
        self._end = 0  # how many of its tokens have been shown

    def watch(self, episode: EndpointEpisode) -> None:
        self.episode = episode

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        assert self.episode is not None, "ProgramPlayer hands the episode to watch() first"
        # The endpoint has put the prompt in its segment, the episode's last, before sampling.
        segment = len(self.episode.segments) - 1
        call = len(self.episode.calls) + 1
        if segment == self._segment:
            show_added(self.console, self.chat, call, segment, prompt_ids[self._end :])
        else:
            show_opening(self.console, self.chat, call, segment, prompt_ids)
        started = time.perf_counter()
        try:
            generation = await self.engine.generate(prompt_ids, sampling)
        except EngineError as exc:
            self.console.print(
                Text(f"the engine failed on this call: {described(exc)}", style="bold red"),
                markup=False,
            )
            raise
        text = self.chat.decode(generation.token_ids)
        show_generation(self.console, generation, text, time.perf_counter() - started)
        if generation.finish_reason != "abort":  # an aborted call is taken back
            self._segment, self._end = segment, len(prompt_ids) + len(generation.token_ids)
            tools = self.episode.segments[segment].tools
            show_tool_calls(self.console, reply_turn(text, parse_calls=bool(tools)))
        return generation

    async def aclose(self) -> None:
        """Nothing: the engine is the REPL's, kept for the next `:gen`."""


def show_opening(
    console: Console, chat: ChatTokenizer, call: int, segment: int, prompt: Sequence[int]
) -> None:
    head = f"── call {call} opens segment {segment + 1}"
    if segment:
        head += (
            " (the program rewrote its history: a separate training sample, with the "
            "episode's reward)"
        )
    console.print(Text(f"{head}; its prompt, {len(prompt)} tokens:", style="bold"), markup=False)
    show_ids(console, chat, prompt, "cyan")


def show_added(
    console: Console, chat: ChatTokenizer, call: int, segment: int, added: Sequence[int]
) -> None:
    console.print(
        Text(
            f"── call {call} extends segment {segment + 1}: the program's messages add "
            f"{len(added)} tokens:",
            style="bold",
        ),
        markup=False,
    )
    show_ids(console, chat, added, "yellow")


def show_ids(console: Console, chat: ChatTokenizer, ids: Sequence[int], style: str) -> None:
    """The tokens' text, special tokens and all, with no line breaks added (the terminal
    wraps it), so that it reads, and copies, as the model sees it."""
    console.print(Text(chat.decode_all(ids), style=style), markup=False, soft_wrap=True)


def show_tool_calls(console: Console, reply: Turn) -> None:
    """The tool calls the program is handed in the reply's `tool_calls` (none when the
    request offered no tools, or a call did not parse: then the reply is all content)."""
    for call in reply.tool_calls:
        line = Text("tool call the program gets: ", style="bold magenta")
        line.append(f"{call.name}({call.arguments})")
        console.print(line, markup=False)
