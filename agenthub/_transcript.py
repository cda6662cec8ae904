"""`transcript()`: the episode as the model saw it, for envs that judge the whole sequence.

An env is given text: the prompt it set and the model's decoded replies. A few need more: a
reward function written for OpenRLHF expects the templated prompt and the decoded token
sequence, special tokens included; a tool env must know that a reply was cut off by the token
limit before taking it as an answer. While an agenthub runner (training, `agenthub eval`, the
REPL) steps an env, `transcript()` gives that view; anywhere else it is `None`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Transcript", "stepping", "transcript"]


@dataclass(frozen=True, slots=True)
class Transcript:
    """The episode so far, token for token, at the moment the env is stepped.

    - `tokens`: the whole sequence: the templated prompt, every reply as sampled and every
      observation as appended, ending with the reply being stepped;
    - `prompt_length`: how many of `tokens` are the opening prompt (before the first reply);
    - `finish_reason`: why the reply being stepped ended: `"stop"` (end of turn, a stop token)
      or `"length"` (cut off by the reply or context token limit, so it may be unfinished).
    """

    tokens: Sequence[int]
    prompt_length: int
    finish_reason: Literal["stop", "length"]
    decode: Callable[[Sequence[int]], str]
    """Token ids to text, special tokens kept (the model's tokenizer)."""

    def text(self) -> str:
        """The whole sequence as text, special tokens included: OpenRLHF's `queries`."""
        return self.decode(self.tokens)

    def prompt_text(self) -> str:
        """The opening prompt as text, chat template and all: OpenRLHF's `prompts`."""
        return self.decode(self.tokens[: self.prompt_length])


_current: contextvars.ContextVar[Transcript | None] = contextvars.ContextVar(
    "agenthub_transcript", default=None
)


def transcript() -> Transcript | None:
    """The episode being stepped, while an agenthub runner steps it (in training, eval and the
    REPL); `None` elsewhere, e.g. under `check_env` or in an env's own tests, where an env
    falls back on what `reset` and `step` were given."""
    return _current.get()


@contextlib.contextmanager
def stepping(view: Transcript) -> Iterator[None]:
    """Make `view` what `transcript()` returns inside the block (for runners)."""
    token = _current.set(view)
    try:
        yield
    finally:
        _current.reset(token)
