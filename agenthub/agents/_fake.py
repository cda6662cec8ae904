"""A deterministic in-memory engine for unit tests and benchmarks of the episode logic."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import anyio

from agenthub.agents._engine import FinishReason, Generation, InferenceEngine, SamplingParams

__all__ = ["FakeEngine"]

Reply = Callable[[Sequence[int]], Sequence[int]]


class FakeEngine(InferenceEngine):
    """Answers every prompt with `reply(prompt_ids)`, cut at `max_tokens`.

    The reply is deterministic in the prompt, and so are the logprobs (a function of the token
    and its position), so tests can check that exactly these ids and logprobs reach the
    trajectory. A reply ending in one of `stop_token_ids` (or in the sampling's stop ids)
    finishes with `stop`, otherwise with `length`; so does one whose text (`decode`, which
    the sampling's `stop` strings need) has come to hold a stop string, as in vLLM: the token
    completing it is the last. `requests` and `generations` keep every
    prompt and result. `latency_s` is awaited once per request and
    `seconds_per_token` per generated token, to stand in for a real engine's cost.
    """

    def __init__(
        self,
        reply: Reply,
        *,
        stop_token_ids: Sequence[int] = (),
        decode: Callable[[Sequence[int]], str] | None = None,
        max_model_len: int = 4096,
        latency_s: float = 0.0,
        seconds_per_token: float = 0.0,
    ) -> None:
        self._reply = reply
        self._stop = frozenset(stop_token_ids)
        self._decode = decode
        self._max_model_len = max_model_len
        self.latency_s = latency_s
        self.seconds_per_token = seconds_per_token
        self.requests: list[tuple[int, ...]] = []
        self.generations: list[Generation] = []
        self.closed = False

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        if self.closed:
            raise RuntimeError("FakeEngine.generate() after aclose()")
        prompt = tuple(prompt_ids)
        if len(prompt) >= self._max_model_len:
            raise ValueError(
                f"prompt of {len(prompt)} tokens does not fit max_model_len={self._max_model_len}"
            )
        self.requests.append(prompt)
        version = self.policy_version
        limit = min(sampling.max_tokens, self._max_model_len - len(prompt))
        stops = self._stop | set(sampling.stop_token_ids)
        if sampling.stop and self._decode is None:
            raise ValueError("FakeEngine needs decode= to honour stop strings")
        out: list[int] = []
        stopped = False
        for token in self._reply(prompt):
            if len(out) == limit:
                break
            out.append(token)
            if token in stops:
                stopped = True
                break
            if sampling.stop and self._decode is not None:
                text = self._decode(out)
                if any(s in text for s in sampling.stop):
                    stopped = True
                    break
        finish: FinishReason = "stop" if stopped else "length"
        delay = self.latency_s + self.seconds_per_token * len(out)
        if delay:
            await anyio.sleep(delay)
        logprobs = tuple(fake_logprob(t, len(prompt) + i) for i, t in enumerate(out))
        generation = Generation(tuple(out), logprobs, finish, version, prompt_tokens=len(prompt))
        self.generations.append(generation)
        return generation

    async def aclose(self) -> None:
        self.closed = True


def fake_logprob(token: int, position: int) -> float:
    """A deterministic, distinct-looking logprob in (-5, 0) for `token` at `position`."""
    digest = hashlib.blake2b(f"{token}:{position}".encode(), digest_size=4).digest()
    return -5.0 * (int.from_bytes(digest, "big") + 1) / (2**32 + 1)
