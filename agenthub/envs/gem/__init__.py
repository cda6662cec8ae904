"""gem's environments (`gem.make`) as an agenthub env:
`agenthub.make("gem", env_id="game:GuessTheNumber-v0-easy")`. Needs the `gem` extra, whose
pins (reasoning-gym 0.1.23, nltk 3.9.1, msgspec 0.19) differ from agenthub's: give it a venv
of its own."""

from agenthub.envs.gem._env import GemEnv

__all__ = ["GemEnv"]
