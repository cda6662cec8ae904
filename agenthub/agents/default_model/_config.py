"""What the default model is built from: one frozen, JSON-able record, part of its cache key."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["BUILDER_VERSION", "DefaultModelConfig"]

# Bump whenever the builder's code changes what it writes: cached models from older builders
# are then rebuilt rather than reused.
BUILDER_VERSION = 2  # 2: the chat template shows tools


class DefaultModelConfig(BaseModel):
    """How to build the embedded default model. The defaults are the default model; tests and
    plugin authors build smaller or differently warm-started ones by overriding fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env_ids: tuple[str, ...] = ("code_exec", "math")
    """Environments whose `tasks("train")` give the demonstrations (tasks carrying
    `metadata["reference"]`)."""
    demos_per_env: int = Field(default=1000, ge=1)
    """Demonstrations drawn from each environment; they also train the tokenizer."""
    mistake_share: float = Field(default=0.5, ge=0.0, le=1.0)
    """Share of the demonstrations that show the task's planted mistake (`metadata["mistake"]`:
    a function that prints instead of returning, a hedged second answer) instead of its
    reference. The warm-started model makes the mistake about this often, a flaw RL removes."""
    vocab_size: int = Field(default=4096, ge=300)
    """BPE vocabulary size, special tokens and the 256 byte symbols included."""
    hidden_size: int = Field(default=256, ge=64)
    intermediate_size: int = Field(default=768, ge=1)
    num_layers: int = Field(default=4, ge=1)
    num_heads: int = Field(default=4, ge=1)
    num_kv_heads: int = Field(default=2, ge=1)
    max_position_embeddings: int = Field(default=4096, ge=64)
    max_demo_tokens: int = Field(default=512, ge=16)
    """Demonstrations longer than this (prompt and response, in tokens) are left out."""
    sft_steps: int = Field(default=360, ge=0)
    """Supervised warm-start steps; few on purpose, so RL has room to improve the model."""
    batch_size: int = Field(default=16, ge=1)
    learning_rate: float = Field(default=3e-3, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _heads_fit(self) -> DefaultModelConfig:
        head_dim, rest = divmod(self.hidden_size, self.num_heads)
        if rest or head_dim < 64:
            raise ValueError(
                f"hidden_size {self.hidden_size} / num_heads {self.num_heads} must be a whole "
                "head dimension of at least 64 (vLLM's CPU attention rejects smaller heads)"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} must be a multiple of num_kv_heads {self.num_kv_heads}"
            )
        return self
