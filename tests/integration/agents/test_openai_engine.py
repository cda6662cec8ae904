"""The OpenAI-compatible engine and `agenthub eval` against a real `vllm serve` on loopback."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import anyio
import pytest

from agenthub.agents import ChatTokenizer, EngineError, OpenAIEngine, SamplingParams
from agenthub.cli import main
from tests.integration.agents.test_vllm_rollouts import (
    expected_stop,
    pick_stop,
    recompute_logprobs,
)
from tests.vllm_server import free_port

pytestmark = pytest.mark.integration


@pytest.mark.timeout(600)
def test_token_ids_in_token_ids_and_logprobs_out(vllm_server: str, default_model: Path) -> None:
    chat = ChatTokenizer.from_pretrained(default_model)
    from agenthub import Message

    prompt = chat.encode_prompt([Message(role="user", content="What is 2 + 2?")])

    context = json.loads((default_model / "config.json").read_text())["max_position_embeddings"]

    async def ask() -> list:  # type: ignore[type-arg]
        engine = await OpenAIEngine.connect(vllm_server)
        engine.set_policy_version(4)
        assert engine.max_model_len == context  # what the server says, not a guess
        try:
            # 4 tokens: fewer than any answer of the default model, so none ends early.
            free = await engine.generate(prompt, SamplingParams(max_tokens=4, seed=1))
            # Stop on whatever token came second: the stop token ends and is kept.
            stop = free.token_ids[1]
            stopped = await engine.generate(
                prompt, SamplingParams(max_tokens=4, seed=1, stop_token_ids=(stop,))
            )
            # A stop string: the reply keeps the tokens sampled up to the one completing it.
            long = SamplingParams(max_tokens=24, seed=5)
            written = await engine.generate(prompt, long)
            text = pick_stop(chat, written)
            by_text = await engine.generate(prompt, long.replace(stop=(text,)))
            assert by_text.finish_reason == "stop"
            assert by_text.token_ids == expected_stop(chat, written, text) != written.token_ids
            return [free, stopped]
        finally:
            await engine.aclose()

    free, stopped = anyio.run(ask)
    assert free.finish_reason == "length" and len(free.token_ids) == 4
    # The served directory is build_default_model's: vLLM samples ids of its vocabulary.
    assert all(0 <= t < len(chat.tokenizer) for t in free.token_ids)
    assert free.policy_version == 4
    assert stopped.finish_reason == "stop" and stopped.token_ids == free.token_ids[:2]
    from agenthub.agents import Trajectory

    sequence = [*prompt, *free.token_ids]
    probe = Trajectory(
        env="-", task_id="-", tokens=sequence, loss_mask=[0] * len(prompt) + [1] * 4,
        logprobs=[0.0] * len(prompt) + list(free.logprobs), policy_versions=[0] * len(sequence),
        step_rewards=[], reward=0.0, terminated=True, truncated=False, num_turns=1,
        timings={},
    )  # fmt: skip
    [recomputed] = recompute_logprobs(default_model, [probe])
    assert recomputed[len(prompt) :] == pytest.approx(list(free.logprobs), abs=1e-3)


def test_unreachable_server_is_an_engine_error() -> None:
    async def connect() -> None:
        await OpenAIEngine.connect(f"http://127.0.0.1:{free_port()}/v1")

    with pytest.raises(EngineError, match="is an OpenAI-compatible server running there"):
        anyio.run(connect)


@pytest.mark.timeout(600)
def test_eval_writes_trajectories_and_summary_and_resumes(
    vllm_server: str, default_model: Path, fixtures: Path, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "prompt": f"What is {i} + {i}?", "label": str(2 * i)}) + "\n"
            for i in range(3)
        )
    )
    out = tmp_path / "out"
    argv = [
        "eval", "--env", "reward_func", f"reward_func={fixtures / 'openrlhf_reward_labels.py'}",
        "--tasks", str(tasks), "--base-url", vllm_server, "--model", str(default_model), "-k", "2",
        "--max-reply-tokens", "8", "--out", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 6
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 6 and summary["tasks"] == 3 and summary["errors"] == {}
    assert summary["tokens"]["generated"] == sum(sum(json.loads(x)["loss_mask"]) for x in lines)

    # A crash mid-write: two whole lines and half of the third survive.
    kept = "\n".join(lines[:2]) + "\n" + lines[2][:40]
    (out / "trajectories.jsonl").write_text(kept)
    assert main(argv) == 0
    resumed = (out / "trajectories.jsonl").read_text().splitlines()
    assert resumed[:2] == lines[:2] and len(resumed) == 6
    assert Counter(json.loads(x)["task_id"] for x in resumed) == {"q0": 2, "q1": 2, "q2": 2}
