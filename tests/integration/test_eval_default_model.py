"""`agenthub eval` end to end on the embedded default model through real vLLM: an OpenRLHF
reward file, an OpenRLHF agent file and the code sandbox env (issue 3's acceptance runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.smoke, pytest.mark.timeout(1500)]

RUNS = {
    "reward_func": [
        f"reward_func={FIXTURES / 'reward_plain.py'}",
        "--tasks",
        str(FIXTURES / "tasks.jsonl"),
    ],
    "openrlhf_agent": [
        f"agent_func={FIXTURES / 'agent_func_new.py'}",
        "--tasks",
        str(FIXTURES / "tasks.jsonl"),
    ],
    "code_exec": ["--split", "held_out", "--temperature", "0"],
}


@pytest.mark.parametrize("env_id", sorted(RUNS))
def test_eval_runs_on_the_default_model(env_id: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "agenthub",
        "eval",
        "--env",
        env_id,
        *RUNS[env_id],
        "-n",
        "3",
        "-k",
        "2",
        "--max-turns",
        "2",
        "--max-reply-tokens",
        "96",
        "--out",
        str(out),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1400)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert summary["episodes"] == len(lines) == 6
    assert not summary["errors"], summary["errors"]
    for line in lines:
        t = json.loads(line)
        assert t["env"] == env_id and 1 in t["loss_mask"]
        assert len(t["tokens"]) == len(t["logprobs"]) == len(t["policy_versions"])
        assert all(lp == 0.0 for lp, m in zip(t["logprobs"], t["loss_mask"], strict=True) if not m)
    if env_id == "code_exec":
        assert summary["mean_reward"] > 0, "the warm-started model solves some held-out tasks"
