"""A process that routes its library logs keeps Ray's, vLLM's, DeepSpeed's and Triton's notices
out of its terminal and in the run's library log, while agenthub's own warnings, a user's prints
and a crash's traceback still reach the terminal. Each case runs in a fresh interpreter, as
every process of a run sets itself up once; the whole run: tests/integration/trainer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agenthub.trainer._library_logs import (
    LIBRARY_LOG_ENV,
    library_log,
    library_log_env,
    route_library_logs,
)

PROCESS = textwrap.dedent(
    """
    import logging, sys
    from pathlib import Path
    from agenthub.trainer._library_logs import route_library_logs

    route_library_logs(Path(sys.argv[1]))
    route_library_logs(Path(sys.argv[1]))  # idempotent: one copy of each line
    import deepspeed  # says "Setting accelerator to CPU" at import, through its own handler
    logging.getLogger("ray._private.authentication.authentication_token_setup").warning(
        "Token authentication is enabled for this Ray cluster."
    )
    logging.getLogger("vllm.triton_utils.importing").warning(
        "Triton is installed, but doesn't include CPU backend. Disabling Triton."
    )
    logging.getLogger("agenthub.train").warning("agenthub: cannot lock the run directory")
    logging.getLogger("agenthub.train").info("agenthub: an info line nobody asked for")
    print("a print in the env's reset")
    raise SystemExit(sys.argv[2]) if len(sys.argv) > 2 else None
    """
)

LIBRARY_LINES = (
    "Setting accelerator to CPU",
    "Token authentication is enabled",
    "doesn't include CPU backend",
)


def _run(log: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROCESS, str(log), *args],
        capture_output=True,
        text=True,
        timeout=110,
    )


def test_library_lines_go_to_the_log_and_agenthubs_own_to_the_terminal(tmp_path: Path) -> None:
    log = library_log(tmp_path / "run")
    done = _run(log, "the run's own error")
    terminal = done.stdout + done.stderr
    for line in LIBRARY_LINES:
        assert line not in terminal, terminal
    written = log.read_text()
    for line in LIBRARY_LINES:
        assert written.count(line) == 1, written
    assert "agenthub: cannot lock the run directory" in done.stderr
    assert "an info line" not in terminal + written
    assert "a print in the env's reset" in done.stdout
    assert done.returncode == 1 and "the run's own error" in done.stderr


def test_the_environment_names_the_log_and_a_vllm_logging_config_into_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH", raising=False)
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "debug")
    log = library_log(tmp_path)
    env = library_log_env(log)
    assert env[LIBRARY_LOG_ENV] == str(log) and log.parent.is_dir()
    config = json.loads(Path(env["VLLM_LOGGING_CONFIG_PATH"]).read_text())
    assert config["handlers"]["file"]["filename"] == str(log)
    assert config["loggers"]["vllm"] == {"handlers": ["file"], "level": "DEBUG", "propagate": False}

    monkeypatch.setenv("VLLM_LOGGING_CONFIG_PATH", "/somewhere/mine.json")
    assert "VLLM_LOGGING_CONFIG_PATH" not in library_log_env(log), "a user's own is kept"


def test_routing_in_this_process_twice_adds_one_handler(tmp_path: Path) -> None:
    import logging

    root = logging.getLogger()
    before = list(root.handlers)
    ray_before = list(logging.getLogger("ray").handlers)
    deepspeed_before = list(logging.getLogger("DeepSpeed").filters)
    try:
        route_library_logs(tmp_path / "a.log")
        route_library_logs(tmp_path / "b.log")
        assert len(root.handlers) == len(before) + 1
        assert not (tmp_path / "b.log").exists()
    finally:
        for handler in set(root.handlers) - set(before):
            root.removeHandler(handler)
            handler.close()
        ray = logging.getLogger("ray")
        for handler in list(ray.handlers):
            ray.removeHandler(handler)
        for handler in ray_before:
            ray.addHandler(handler)
        logging.getLogger("DeepSpeed").filters[:] = deepspeed_before
