"""The `InferenceEngine` seam: token ids in, sampled token ids and their logprobs out."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["FinishReason", "Generation", "InferenceEngine", "SamplingParams"]

FinishReason = Literal["stop", "length", "abort"]
"""Why a generation ended: `stop` at an end-of-turn or stop token (included in `token_ids`),
`length` at `max_tokens` or the context limit, `abort` when the engine gave up on the request."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample one generation. agenthub's own type, translated by each engine.

    `max_tokens` bounds this one generation; the episode runner lowers it further to what the
    episode's token budget and the engine's context leave. `stop_token_ids` end the generation
    in addition to the model's end-of-sequence token; the stop token is part of the output.
    `stop` strings end it after the token that completes one of them: the output keeps every
    token as sampled, so the string and whatever else that last token holds are part of it.
    """

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a tuple of non-empty strings, got {self.stop!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    def replace(self, **changes: object) -> SamplingParams:
        """A copy with `changes` applied (for example a lower `max_tokens`)."""
        import dataclasses

        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_stop(self, strings: Sequence[str]) -> SamplingParams:
        """A copy that also stops at `strings` (an env's own), each string once, in order."""
        merged = tuple(dict.fromkeys((*self.stop, *strings)))
        return self if merged == self.stop else self.replace(stop=merged)


@dataclass(frozen=True, slots=True)
class Generation:
    """One sampled continuation, exactly as the engine produced it.

    `logprobs[i]` is the log-probability of `token_ids[i]` under the distribution the engine
    sampled from (temperature applied); `policy_version` is the engine's weights version when
    the request was served.
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    policy_version: int
    prompt_tokens: int = field(default=0)

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(
                f"Generation has {len(self.token_ids)} token ids but {len(self.logprobs)} logprobs"
            )


class InferenceEngine(abc.ABC):
    """Something that continues a sequence of token ids: in-process vLLM, an OpenAI-compatible
    server, or a fake.

    Contract:

    - `generate` is a coroutine that serves many concurrent calls; the engine batches them.
      It never re-tokenizes: the prompt is the exact token ids given, and the result is the
      exact token ids sampled, each with its logprob.
    - `generate` is cancellation-safe: cancelling the awaiting task aborts the request in the
      engine, so no work is left running for it.
    - `policy_version` is an integer the engine holds and stamps on every `Generation`; the
      learner raises it with `set_policy_version` when it syncs new weights.
    - `max_model_len` is the longest sequence (prompt plus generation) the engine accepts.
    - `aclose` releases the engine (processes, connections) and may be called more than once.

    Failures to generate raise `EngineError`; the episode runner records them on the
    trajectory as `generation_error`.
    """

    _policy_version: int = 0

    @abc.abstractmethod
    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        """Sample one continuation of `prompt_ids`."""

    @property
    @abc.abstractmethod
    def max_model_len(self) -> int:
        """The longest sequence, prompt plus generation, the engine accepts."""

    @property
    def policy_version(self) -> int:
        """The version of the weights now serving requests."""
        return self._policy_version

    def set_policy_version(self, version: int) -> None:
        """Record that the engine now serves weights of `version` (called after a weight sync)."""
        if version < self._policy_version:
            raise ValueError(
                f"policy version may only grow: engine is at {self._policy_version}, got {version}"
            )
        self._policy_version = version

    async def aclose(self) -> None:
        """Release the engine. Idempotent."""
        return None

    async def __aenter__(self) -> InferenceEngine:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
