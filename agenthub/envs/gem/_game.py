"""One gem env, made with `gem.make` (no wrappers: each observation is only what is new) and
its use of the global random generators kept to itself."""

from __future__ import annotations

from typing import Any

from agenthub.envs._foreign import (
    OwnRandom,
    import_foreign,
    module_source,
    source_needs_network,
)
from agenthub.envs._games import near_ids


def gem() -> Any:
    return import_foreign("gem", env="gem", extra="gem")


def check_id(env_id: str) -> None:
    registry = import_foreign("gem.envs.registration", env="gem", extra="gem").ENV_REGISTRY
    if env_id not in registry:
        raise ValueError(f"gem has no env {env_id!r}; ids like it: {near_ids(registry, env_id)}")


def known_envs() -> dict[str, bool]:
    """gem's env ids, each mapped to whether it runs without network. Read from each env's
    source rather than by importing it: importing some downloads."""
    registry = import_foreign("gem.envs.registration", env="gem", extra="gem").ENV_REGISTRY
    known = {}
    for env_id, spec in registry.items():
        entry = spec.entry_point
        module = entry.split(":")[0] if isinstance(entry, str) else entry.__module__
        known[env_id] = not source_needs_network(module_source(module))
    return dict(sorted(known.items()))


class Game:
    """A gem env. Every method blocks: call it from a worker thread."""

    def __init__(self, env_id: str, kwargs: dict[str, Any]) -> None:
        self._env_id = env_id
        self._kwargs = kwargs
        self._env: Any = None
        # gem's reset seeds the global `random` and `np.random`, and its games draw from them.
        self._random = OwnRandom()

    def reset(self, seed: int) -> str:
        def start() -> str:
            if self._env is None:
                self._env = gem().make(self._env_id, **self._kwargs)
            observation, _ = self._env.reset(seed=seed)
            return str(observation)

        return self._random.run(start)

    def step(self, action: str) -> tuple[str, float, bool, bool]:
        def play() -> tuple[str, float, bool, bool]:
            observation, reward, terminated, truncated, _ = self._env.step(action)
            return str(observation), float(reward), bool(terminated), bool(truncated)

        return self._random.run(play)
