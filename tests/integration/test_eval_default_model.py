"""`agenthub eval` end to end on the embedded default model through real vLLM: an OpenRLHF
reward file (finding the reply by the chat template's markers), an OpenRLHF agent file, the
code sandbox env, the math verifier and an LLM judge served on loopback (the acceptance runs
of the rollout, sandbox and math/judge issues)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ..conftest import FIXTURES, REPO
from ..judge_server import judge_server
from ..unit._plugins import declare

pytestmark = [pytest.mark.integration, pytest.mark.smoke, pytest.mark.timeout(1500)]

RUNS = {
    "reward_func": [
        f"reward_func={FIXTURES / 'openrlhf_reward_chat.py'}",
        "--tasks",
        str(FIXTURES / "tasks.jsonl"),
    ],
    "openrlhf_agent": [
        f"agent_func={FIXTURES / 'agent_func_new.py'}",
        "--tasks",
        str(FIXTURES / "tasks.jsonl"),
    ],
    "code_exec": ["max_turns=2", "--split", "held_out", "--temperature", "0"],
    "math": ["--split", "held_out", "--temperature", "0"],
}


# The main job's env runs on the engine `agenthub eval` starts by default; the others only need
# a model to answer and share one `vllm serve` (tests/vllm_server.py).
IN_PROCESS = {"code_exec"}


@pytest.mark.parametrize("env_id", sorted(RUNS))
def test_eval_runs_on_the_default_model(
    env_id: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    served = None if env_id in IN_PROCESS else request.getfixturevalue("vllm_server")
    summary = run_eval(env_id, RUNS[env_id], tmp_path / "run", served)
    if env_id == "code_exec":
        # The sandbox ran every reply; whether greedy replies pass on 3 tasks is the model's
        # business (its warm start prints instead of returning half the time, on purpose).
        runs = [json.loads(line) for line in summary["lines"]]
        assert all(r["error"] is None and "pass_fraction" in r["extra_logs"] for r in runs)
    if env_id == "reward_func":
        # As in OpenRLHF: prompts templated, queries the prompt followed by the reply.
        assert all(
            json.loads(line)["extra_logs"] == {"templated": 1.0} for line in summary["lines"]
        )


def test_eval_runs_the_llm_judge_env_on_the_default_model(tmp_path: Path, vllm_server: str) -> None:
    with judge_server() as (url, script):
        args = [f"judge_url={url}", "judge_model=judge-1", "--tasks", str(FIXTURES / "tasks.jsonl")]
        summary = run_eval("judge", args, tmp_path, vllm_server)
    assert 1 <= len(script.requests) <= 6, "each reply judged once (identical ones cached)"
    assert {round(r, 1) for r in summary["rewards"]} <= {0.2, 0.9}


def test_eval_shows_a_tool_env_s_tools_to_the_default_model(
    tmp_path: Path, vllm_server: str
) -> None:
    from transformers import AutoTokenizer

    from agenthub.agents.default_model import ensure_default_model

    site = tmp_path / "site"
    site.mkdir()
    declare(site, "calculator-tools", {"calculator": "tests.unit._tool_envs:Calculator"})
    paths = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", paths)
        summary = run_eval("calculator", ["--temperature", "0"], tmp_path / "run", vllm_server)
    tokenizer = AutoTokenizer.from_pretrained(str(ensure_default_model()))
    for line in summary["lines"]:
        t = json.loads(line)
        opening = tokenizer.decode(t["tokens"][: t["loss_mask"].index(1)])
        assert opening.startswith("<|im_start|>system\nYou can call these tools")
        assert '"name": "add", "description": "Add two integers."' in opening
        assert opening.endswith("Use the tools.<|im_end|>\n<|im_start|>assistant\n")


def run_eval(
    env_id: str, args: list[str], out: Path, base_url: str | None = None
) -> dict[str, Any]:
    """`agenthub eval` of 3 tasks x 2 samples, on its own engine or on the `vllm serve` at
    `base_url`; checks the run's files, returns the summary."""
    if base_url is not None:
        from agenthub.agents.default_model import ensure_default_model

        args = [*args, "--base-url", base_url, "--model", str(ensure_default_model())]
    command = [
        sys.executable,
        "-m",
        "agenthub",
        "eval",
        "--env",
        env_id,
        *args,
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
    # vLLM's CPU warnings (a FutureWarning, a C++ notice of NUMA binding) stay out of the way.
    assert "Warning" not in result.stderr, result.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert summary["episodes"] == len(lines) == 6
    assert not summary["errors"], summary["errors"]
    for line in lines:
        t = json.loads(line)
        assert t["env"] == env_id and 1 in t["loss_mask"]
        assert len(t["tokens"]) == len(t["logprobs"]) == len(t["policy_versions"])
        assert all(lp == 0.0 for lp, m in zip(t["logprobs"], t["loss_mask"], strict=True) if not m)
    summary["rewards"] = [json.loads(line)["reward"] for line in lines]
    summary["lines"] = lines
    return summary


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_engine_starts_ends_eval_at_once(sig: str, tmp_path: Path) -> None:
    # A Ctrl-C there killed the engine core (it shares the terminal's process group) and vLLM
    # waited out its 10-minute start-up handshake for it; SIGTERM went unanswered as long.
    import signal
    import time

    import psutil

    command = [sys.executable, "-m", "agenthub", "eval", "--env", "math", "-n", "2"]
    with subprocess.Popen(
        [*command, "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as process:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            # The engine core is a spawned child of its own, known by its command line: a child
            # caught between fork and exec still has eval's (the resource tracker's start, which
            # can come before the start's signal handling), and a signal then is not the start's.
            children = psutil.Process(process.pid).children()
            if any(_spawned(child) for child in children):
                break
            time.sleep(0.05)
        os.killpg(process.pid, getattr(signal, sig))  # as a terminal's Ctrl-C, or `kill`
        # At once, not after the start-up handshake's 10 minutes: the deadline is generous, as
        # the thread that answers the signal needs the GIL, which vLLM's import on a busy
        # machine holds for seconds at a time (60 s was passed once under load).
        _, err = process.communicate(timeout=180)
    assert process.returncode == 130, err.decode()[-2000:]
    assert "interrupted while the engine started" in err.decode()
    assert not [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(tmp_path) in " ".join(p.info["cmdline"] or [])
    ], "a process of the interrupted eval is left"


def _spawned(process: Any) -> bool:
    """A `multiprocessing` spawn child (vLLM's engine core), not its resource tracker."""
    import psutil

    try:
        return "spawn_main" in " ".join(process.cmdline())
    except psutil.Error:  # gone, or not yet readable
        return False
