"""`agenthub eval` end to end on the embedded default model through real vLLM, on each
adapter to another hub: episodes run, are recorded token-exact (checked by `run_eval`), and a
foreign env's failure is a typed error on its episode, not the end of the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..test_eval_default_model import run_eval

pytestmark = [pytest.mark.integration, pytest.mark.smoke, pytest.mark.timeout(1500)]

RUNS = {
    "reasoning_gym": ["dataset=basic_arithmetic", "size=3", "--split", "held_out"],
    "textarena": ["env_id=TowerOfHanoi-v0", "num_tasks=3"],
}


@pytest.mark.parametrize("env_id", sorted(RUNS))
def test_eval_runs_the_adapter_on_the_default_model(
    env_id: str, tmp_path: Path, vllm_server: str
) -> None:
    summary = run_eval(env_id, RUNS[env_id], tmp_path / "run", vllm_server)
    for line in summary["lines"]:
        t = json.loads(line)
        assert t["score"] in (0.0, 1.0) or t["truncated"], t


def test_a_game_that_needs_the_network_fails_its_episodes_typed(
    tmp_path: Path, vllm_server: str, default_model: Path
) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "agenthub", "eval", "--env", "textarena"]
    command += ["env_id=Wordle-v0", "num_tasks=2", "-n", "2", "--max-reply-tokens", "16"]
    command += ["--base-url", vllm_server, "--model", str(default_model)]
    result = subprocess.run(
        [*command, "--out", str(out)], capture_output=True, text=True, timeout=1400
    )
    # The run ends, and says why: every episode failed, so it measured nothing (exit 1).
    assert result.returncode == 1, result.stderr[-4000:]
    assert "2 of 2 episodes ended in errors (env_error x2)" in result.stderr
    runs = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(runs) == 2
    for t in runs:
        assert t["error"]["cause"] == "env_error", t["error"]
        assert (
            "textarena could not reach the network while starting Wordle-v0"
            in t["error"]["message"]
        )
