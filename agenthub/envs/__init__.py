"""Built-in environments. Build them with `agenthub.make(id, ...)`; each is registered through
the `agenthub.envs` entry-point group exactly like a plugin."""

__all__: list[str] = []
