"""One TextArena game, played with its actions wrapped as TextArena wraps them, its
observations read raw (each call returns only what is new) and its use of Python's global
`random` kept to itself."""

from __future__ import annotations

import importlib
from typing import Any

from agenthub.envs._foreign import (
    OwnRandom,
    import_foreign,
    module_source,
    source_needs_network,
)
from agenthub.envs._games import near_ids


def textarena() -> Any:
    return import_foreign("textarena", env="textarena", extra="textarena")


def game_spec(env_id: str) -> Any:
    registry = textarena().envs.registration.ENV_REGISTRY
    if env_id not in registry:
        near = near_ids(registry, env_id)
        raise ValueError(f"TextArena has no game {env_id!r}; ids like it: {near}")
    return registry[env_id]


def known_games() -> dict[str, bool]:
    """TextArena's single-player game ids, each mapped to whether it runs without network.
    Read from each game's source rather than by importing it: importing some downloads."""
    known = {}
    for env_id, spec in textarena().envs.registration.ENV_REGISTRY.items():
        entry = spec.entry_point
        source = module_source(entry.split(":")[0] if isinstance(entry, str) else entry.__module__)
        if "SinglePlayerState" in source:
            known[env_id] = not source_needs_network(source)
    return dict(sorted(known.items()))


class Game:
    """A TextArena game for one player. Every method blocks: call it from a worker thread."""

    def __init__(self, env_id: str, kwargs: dict[str, Any]) -> None:
        self._env_id = env_id
        self._kwargs = kwargs
        self._env: Any = None
        # TextArena's State seeds the global `random` and its games draw from it.
        self._random = OwnRandom()

    def _build(self) -> Any:
        ta = textarena()
        spec = game_spec(self._env_id)
        factory = spec.entry_point
        if isinstance(factory, str):
            module, name = factory.split(":")
            factory = getattr(importlib.import_module(module), name)
        env = factory(**{**spec.kwargs, **self._kwargs})
        env.env_id = self._env_id
        # The id's action wrappers (bracketing a bare move) stay; its observation wrappers,
        # which return the whole transcript every turn, do not: agenthub adds new text only.
        for wrapper in spec.default_wrappers or ():
            if issubclass(wrapper, ta.ActionWrapper):
                env = wrapper(env)
        return env

    def reset(self, seed: int) -> str:
        def start() -> str:
            if self._env is None:
                self._env = self._build()
            self._env.reset(num_players=1, seed=seed)
            return self._new_text()

        return self._random.run(start)

    def step(self, action: str) -> tuple[bool, str]:
        def play() -> tuple[bool, str]:
            done, _ = self._env.step(action=action)
            return bool(done), self._new_text()

        return self._random.run(play)

    def outcome(self) -> tuple[float, dict[str, Any]]:
        """The player's reward and TextArena's game info (reason, invalid_move, turn_count)."""
        rewards, game_info = self._env.close()
        return float((rewards or {}).get(0, 0.0)), dict(game_info.get(0, {}))

    def _new_text(self) -> str:
        """What the player has not seen yet, as TextArena's LLM wrapper writes each message
        (`[GAME] ...`), less the echo of the player's own move."""
        ta = textarena()
        _, messages = self._env.get_observation()
        roles = self._env.state.role_mapping
        lines = []
        for sender, text, kind in messages:
            if kind == ta.ObservationType.PLAYER_ACTION:  # the move itself, as the reply said it
                continue
            name = "GAME" if sender == ta.GAME_ID else roles.get(sender, f"Player {sender}")
            lines.append(f"[{name}] {text}")
        return "\n".join(lines)
