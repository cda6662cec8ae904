"""TextArena's single-player games (`ta.make`, reset/get_observation/step/close) as an
agenthub env: `agenthub.make("textarena", env_id="TowerOfHanoi-v0")`. Needs the `textarena`
extra."""

from agenthub.envs.textarena._env import TextArenaEnv

__all__ = ["TextArenaEnv"]
