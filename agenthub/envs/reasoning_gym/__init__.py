"""reasoning-gym's procedural datasets (`create_dataset`, `score_answer`) as an agenthub env:
`agenthub.make("reasoning_gym", dataset="basic_arithmetic")`. Needs the `reasoning-gym`
extra."""

from agenthub.envs.reasoning_gym._datasets import HELD_OUT_SEED_OFFSET
from agenthub.envs.reasoning_gym._env import ReasoningGymEnv

__all__ = ["HELD_OUT_SEED_OFFSET", "ReasoningGymEnv"]
