"""How episodes are run: budgets, timeouts, concurrency."""

from __future__ import annotations

from dataclasses import dataclass, field

from agenthub.agents._engine import SamplingParams

__all__ = ["RolloutConfig", "Timeouts"]


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds each phase of an episode may take before it is recorded as timed out.

    `generate_s` bounds one `generate` call; `env_step_s` one `reset` or `step` of the env;
    `score_s` one call of the runner's outcome scorer. `close_s` bounds `aclose` at the end of
    an episode (then the episode's result stands and the env is abandoned). `None` waits
    forever. `env_step_s` leaves room for a remote judge's retries (by default 4 attempts of
    up to 60 s each), which end in the judge's own error naming the server.
    """

    generate_s: float | None = 300.0
    env_step_s: float | None = 300.0
    score_s: float | None = 60.0
    close_s: float = 10.0


@dataclass(frozen=True, slots=True)
class RolloutConfig:
    """What every episode of a run gets.

    - `sampling`: how each reply is sampled; its `max_tokens` bounds one reply.
    - `max_turns`: replies per episode; an episode still going after that is `truncated`.
      `None` (the default) leaves the number of turns to the env, within `max_tokens`.
    - `max_tokens`: the longest token sequence (prompt, replies and env messages) an episode
      may reach; `None` means the engine's context length. Running out is `truncated`.
    - `concurrency`: episodes in flight at once (each with its own env instance).
    - `n_samples_per_prompt`: episodes per task, returned together as a group.
    - `chat_template`: render prompts and env messages through the tokenizer's chat template
      (off: text prompts, tokenized as they are).
    - `seed`: base seed for env resets: each episode's env seed is derived from it, the task
      id and the sample index (`None`: unseeded). Likewise each request's sampling seed is
      derived from `sampling.seed`, the task, the sample and the turn.
    """

    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_turns: int | None = None
    max_tokens: int | None = None
    concurrency: int = 32
    n_samples_per_prompt: int = 1
    chat_template: bool = True
    timeouts: Timeouts = field(default_factory=Timeouts)
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_turns", "concurrency", "n_samples_per_prompt"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_tokens is not None and self.max_tokens < 2:
            raise ValueError(f"max_tokens must be at least 2, got {self.max_tokens}")
