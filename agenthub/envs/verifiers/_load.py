"""Loading a verifiers environment once per process, where verifiers allows it."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Mapping
from typing import Any

from agenthub.envs.verifiers._bridge import legacy

_LOADED: dict[str, Any] = {}
_LOCK = threading.Lock()


def load(env_id: str, env_args: Mapping[str, Any]) -> Any:
    """`vf.load_environment(env_id, **env_args)`, made once per process and shared: a
    verifiers environment runs many rollouts at once.

    verifiers' `Environment` installs SIGINT and SIGTERM handlers when built, which works on
    the main thread only and would take Ctrl-C from agenthub: the handlers agenthub had are
    put back (verifiers' teardown still runs at exit, through `atexit`)."""
    key = json.dumps([env_id, env_args], sort_keys=True, default=repr)
    with _LOCK:
        if key not in _LOADED:
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError(
                    f"verifiers environments must be built on the main thread (verifiers "
                    f"installs signal handlers when building {env_id!r}): make the env there"
                )
            handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                _LOADED[key] = legacy().load_environment(env_id, **env_args)
            finally:
                for number, handler in handlers.items():
                    signal.signal(number, handler)
        return _LOADED[key]
