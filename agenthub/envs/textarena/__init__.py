"""TextArena's single-player games (`ta.make`, reset/get_observation/step/close) as an
agenthub env: `agenthub.make("textarena", env_id="TowerOfHanoi-v0")`. Needs the `textarena`
extra."""

from agenthub.envs.textarena._env import HELD_OUT_SEED_OFFSET, TextArenaEnv

__all__ = ["HELD_OUT_SEED_OFFSET", "TextArenaEnv"]
