"""A training run's terminal shows agenthub's own lines: what Ray, DeepSpeed, vLLM and Triton say
at start-up (from the driver, the learner and rollout worker actors and the engine core) is in
the run's `logs/libraries.log`, and only there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.trainer.test_train_cli import SMALL, _complete, _trained_steps

pytestmark = [pytest.mark.integration, pytest.mark.smoke]

LIBRARY_LINES = (
    "Token authentication is",  # Ray, in the driver's ray.init
    "Setting accelerator to CPU",  # DeepSpeed, at its import in the learner actor
    "doesn't include CPU backend",  # Triton without its CPU build, as vLLM imports it
)


@pytest.mark.timeout(900)
def test_library_notices_go_to_the_run_directory_not_the_terminal(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = _complete(out, "--env", "code_exec", "--steps", "1", *SMALL, "eval.every=0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _trained_steps(out) == [1]
    assert json.loads(done.stdout)["steps"] == 1, "stdout is the JSON summary alone"
    terminal = done.stdout + done.stderr
    for line in LIBRARY_LINES:
        assert line not in terminal, f"{line!r} reached the terminal:\n{done.stderr[-4000:]}"
    log = (out / "logs" / "libraries.log").read_text()
    for line in LIBRARY_LINES:
        assert line in log, f"{line!r} is not in the library log:\n{log[-4000:]}"
