"""What the libraries say goes to the run directory's `logs/libraries.log`, not the terminal.

A training run's terminal shows agenthub's own lines (and what an env prints, and a crash's
error); Ray, vLLM, DeepSpeed and Triton tell their start-up notices to a log file that stays
beside the run for debugging. Each process of the run routes its own:

- the driver calls `route_library_logs(path)` before `ray.init`, and passes
  `library_log_env(path)` to Ray as the job's `runtime_env["env_vars"]`;
- every Ray worker process reads that in the `worker_process_setup_hook`
  (`agenthub.trainer._workers.output_to_stderr`) and routes its own the same way;
- the rollout workers' vLLM engine cores (child processes that Ray does not set up) find vLLM's
  logging configuration by the `VLLM_LOGGING_CONFIG_PATH` they inherit, and write what they
  print before it applies into the same file (`VLLMEngine(output=...)`).

Per library: Ray logs to the "ray" logger's own handler, replaced here by the file; vLLM takes a
`dictConfig` file (`VLLM_LOGGING_CONFIG_PATH`, its documented way) and logs through the root
logger before it applies it (Triton's missing CPU backend, at import); DeepSpeed logs through
one logger, "DeepSpeed", whose stream handler is made at import, so a filter set on that logger
before then hands its records to the file. Records of any other logger at WARNING or above go
to stderr, as Python shows them when nothing is configured.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

__all__ = [
    "LIBRARIES",
    "LIBRARY_LOG_ENV",
    "library_log",
    "library_log_env",
    "route_library_logs",
]

LIBRARY_LOG_ENV = "AGENTHUB_LIBRARY_LOG"
"""Names the run's library log in the environment of its Ray worker processes."""

LIBRARIES = ("ray", "vllm", "DeepSpeed", "deepspeed", "torch", "triton", "transformers")
"""Loggers (and their children) whose records go to the library log."""

_FORMAT = "%(asctime)s %(levelname)s %(name)s (pid %(process)d) %(message)s"


def library_log(run_dir: Path) -> Path:
    """Where a run in `run_dir` keeps what the libraries say."""
    return run_dir / "logs" / "libraries.log"


def library_log_env(path: Path) -> dict[str, str]:
    """Environment for every process of the run: the library log, and vLLM's logging
    configuration that writes into it (written beside it; a user's own
    `VLLM_LOGGING_CONFIG_PATH` is kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    env = {LIBRARY_LOG_ENV: str(path)}
    if "VLLM_LOGGING_CONFIG_PATH" not in os.environ:
        config = path.parent / "vllm-logging.json"
        config.write_text(json.dumps(_vllm_logging(path), indent=2) + "\n")
        env["VLLM_LOGGING_CONFIG_PATH"] = str(config)
    return env


def _vllm_logging(path: Path) -> dict[str, object]:
    level = os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": _FORMAT}},
        "handlers": {
            "file": {
                "class": "logging.FileHandler",
                "filename": str(path),
                "formatter": "plain",
                "level": level,
            }
        },
        "loggers": {"vllm": {"handlers": ["file"], "level": level, "propagate": False}},
    }


def _is_library(name: str) -> bool:
    return any(name == lib or name.startswith(f"{lib}.") for lib in LIBRARIES)


class _Router(logging.Handler):
    """The root logger's handler: libraries' records to the file, others' to stderr at
    WARNING and above (what Python's last-resort handler shows when none is set)."""

    def __init__(self, file: logging.Handler) -> None:
        super().__init__()
        self.file = file

    def emit(self, record: logging.LogRecord) -> None:
        if _is_library(record.name):
            self.file.handle(record)
        elif record.levelno >= logging.WARNING and logging.lastResort is not None:
            logging.lastResort.handle(record)


class _ToFile(logging.Filter):
    """On a library's logger whose handlers are made at its import: its records go to the
    file instead."""

    def __init__(self, file: logging.Handler) -> None:
        super().__init__()
        self.file = file

    def filter(self, record: logging.LogRecord) -> bool:
        self.file.handle(record)
        return False


def route_library_logs(path: Path) -> None:
    """In this process, send the libraries' log records to `path` (see the module docstring).
    Idempotent; call it before the libraries are imported where it can be."""
    root = logging.getLogger()
    if any(isinstance(h, _Router) for h in root.handlers):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    file = logging.FileHandler(path, encoding="utf-8")
    file.setFormatter(logging.Formatter(_FORMAT))
    root.addHandler(_Router(file))
    logging.getLogger("DeepSpeed").addFilter(_ToFile(file))
    import ray  # noqa: F401  (Ray sets its handler up at its first import, and never again)

    ray_logger = logging.getLogger("ray")
    for handler in list(ray_logger.handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(
            handler, logging.FileHandler
        ):
            ray_logger.removeHandler(handler)
    ray_logger.addHandler(file)
