"""agenthub environments handed to other trainers.

- `agenthub.integrations.openenv_server`: any agenthub env served over OpenEnv's wire
  protocol (HTTP and WebSocket sessions), the path for TRL, SkyRL, NeMo Gym and Unsloth
  through OpenEnv's own clients; `agenthub serve` runs it.

Each integration imports its foreign package, if it needs one, only when used.
"""

__all__: list[str] = []
