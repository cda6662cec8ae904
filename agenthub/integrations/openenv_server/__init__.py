"""Any agenthub env served over OpenEnv's wire protocol, so OpenEnv's clients (and the
trainers built on them: TRL, SkyRL, NeMo Gym, Unsloth) play it: `agenthub serve`.

One env instance per session (a WebSocket connection, or an HTTP session begun by `POST
/reset`), built on its first reset and closed when the session ends or idles past its
timeout; at most `max_sessions` at a time. An action is `{"message": REPLY}`; an
observation carries the env's answer (`messages` or `text`), on reset the task's `prompt`,
`tools` and `stop`, and `terminated`, `truncated`, `score`, `info`, `extra_logs`.
"""

from agenthub.integrations.openenv_server._app import build_app
from agenthub.integrations.openenv_server._errors import ServeError
from agenthub.integrations.openenv_server._protocol import (
    ResetParams,
    ServedAction,
    ServedObservation,
    ServedState,
)
from agenthub.integrations.openenv_server._sessions import ServeConfig, check_buildable

__all__ = [
    "ResetParams",
    "ServeConfig",
    "ServeError",
    "ServedAction",
    "ServedObservation",
    "ServedState",
    "build_app",
    "check_buildable",
]
