"""`agenthub serve-rm` as a real server on loopback: protocol, batching, bad bodies, and the
judge env scoring through it."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agenthub import Task, make

from ..conftest import FIXTURES, REPO
from ..tiny_model import build_openrlhf_reward_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_rm(*args: str) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agenthub", "serve-rm", *args, "--port", str(port)],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"serve-rm did not come up: {proc.communicate()[1]}")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("serve-rm did not stop within 30 s of SIGTERM") from None
        finally:
            if proc.stderr:
                proc.stderr.close()


@pytest.fixture(scope="module")
def plain_server() -> Iterator[str]:
    with serve_rm("--reward-func", str(FIXTURES / "reward_plain.py")) as base:
        yield base


def test_reward_function_is_served_over_the_openrlhf_protocol(plain_server: str) -> None:
    body = {"query": ["Q: 5", "Q: 6"], "prompts": ["Q: ", "Q: "], "labels": ["5", "5"]}
    answer = httpx.post(f"{plain_server}/get_reward", json=body, timeout=30)
    assert answer.status_code == 200
    assert answer.json() == {"rewards": [1.0, -1.0], "scores": [1.0, 0.0]}
    health = httpx.get(f"{plain_server}/health", timeout=30).json()
    assert health["status"] == "ok" and "reward_plain.py" in health["scorer"]


@pytest.mark.parametrize(
    ("content", "status", "message"),
    [
        ("not json", 400, "not JSON"),
        ('["a"]', 422, "JSON object"),
        ("{}", 422, "missing field 'query'"),
        ('{"quer": ["a"]}', 422, r"missing field 'query' \(fields sent: 'quer'\)"),
        ('{"query": [1, 2]}', 422, "list of strings"),
        ('{"query": ["a", "b"], "prompts": ["a"]}', 422, r"'prompts' .* \(2\), got 1 items"),
        ('{"query": ["a"], "labels": "x"}', 422, "'labels' must be a list"),
        ('{"query": ["a"]}', 422, "missing field 'labels': this reward function takes labels"),
    ],
)
def test_malformed_bodies_get_a_clear_4xx(
    plain_server: str, content: str, status: int, message: str
) -> None:
    answer = httpx.post(f"{plain_server}/get_reward", content=content, timeout=30)
    assert answer.status_code == status
    assert re.search(message, answer.json()["detail"])


def test_an_empty_batch_gets_empty_lists(plain_server: str) -> None:
    body = {"query": [], "prompts": [], "labels": []}
    answer = httpx.post(f"{plain_server}/get_reward", json=body, timeout=30)
    assert answer.status_code == 200
    assert answer.json() == {"rewards": [], "scores": []}, "the fields a sample would get"


def test_concurrent_requests_are_batched(plain_server: str) -> None:
    before = httpx.get(f"{plain_server}/health", timeout=30).json()

    async def main() -> dict[int, float]:
        rewards: dict[int, float] = {}
        async with httpx.AsyncClient(timeout=60) as client:

            async def one(i: int) -> None:
                response = str(i) if i % 2 == 0 else "no"
                body = {"query": [f"p{response}"], "prompts": ["p"], "labels": [str(i)]}
                answer = await client.post(f"{plain_server}/get_reward", json=body)
                rewards[i] = answer.json()["rewards"][0]

            async with anyio.create_task_group() as group:
                for i in range(60):
                    group.start_soon(one, i)
        return rewards

    rewards = anyio.run(main)
    after = httpx.get(f"{plain_server}/health", timeout=30).json()
    assert rewards == {i: 1.0 if i % 2 == 0 else -1.0 for i in range(60)}
    assert after["requests"] - before["requests"] == 60
    assert after["batches"] - before["batches"] < 60


@pytest.mark.parametrize("path", ["/get_reward", "/get_reward/"])
def test_judge_env_scores_through_serve_rm(plain_server: str, path: str) -> None:
    async def main() -> float:
        env = make("judge", rm_url=f"{plain_server}{path}")
        await env.reset(Task(id="t", prompt="2+3=", label="5"))
        reward = (await env.step("5")).reward
        await env.aclose()
        return reward

    assert anyio.run(main) == 1.0


def test_slow_scoring_does_not_block_the_event_loop(tmp_path: Path) -> None:
    slow = tmp_path / "slow.py"
    slow.write_text(
        "import time\n\ndef reward_func(queries, prompts, labels):\n"
        "    time.sleep(3)\n    return [1.0] * len(queries)\n"
    )
    with serve_rm("--reward-func", str(slow)) as base:
        import threading

        result: dict[str, Any] = {}
        thread = threading.Thread(
            target=lambda: result.update(
                r=httpx.post(
                    f"{base}/get_reward", json={"query": ["x"], "labels": [None]}, timeout=60
                )
            )
        )
        thread.start()
        time.sleep(0.5)
        health = httpx.get(f"{base}/health", timeout=60)
        answered_during_scoring = thread.is_alive()
        thread.join(60)
    assert health.status_code == 200 and answered_during_scoring
    assert result["r"].json() == {"rewards": [1.0]}


def test_a_failing_reward_function_is_a_500_with_the_reason(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def reward_func(q, p, l):\n    raise KeyError('field')\n")
    with serve_rm("--reward-func", str(broken)) as base:
        answer = httpx.post(
            f"{base}/get_reward", json={"query": ["x"], "labels": ["y"]}, timeout=60
        )
    assert answer.status_code == 500 and "KeyError" in answer.json()["detail"]


def _tiny_classifier(path: Path) -> None:
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghijklmnopqrstuvwxyz0123456789"]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(path / "vocab.txt"))
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    import torch

    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


def test_sequence_classification_model_is_served(tmp_path: Path) -> None:
    _tiny_classifier(tmp_path)
    with serve_rm("--model", str(tmp_path)) as base:
        one = httpx.post(f"{base}/get_reward", json={"query": ["abc"]}, timeout=60).json()
        two = httpx.post(
            f"{base}/get_reward", json={"query": ["abc", "zzz 123 q"]}, timeout=60
        ).json()
        none = httpx.post(f"{base}/get_reward", json={"query": []}, timeout=60)
    assert len(one["rewards"]) == 1 and len(two["rewards"]) == 2
    assert two["rewards"][0] == pytest.approx(one["rewards"][0], abs=1e-4), "padding is masked"
    assert two["rewards"][0] != two["rewards"][1]
    assert none.status_code == 200 and none.json() == {"rewards": []}


def test_a_model_failing_on_a_query_answers_500_and_keeps_serving(tmp_path: Path) -> None:
    _tiny_classifier(tmp_path)
    with serve_rm("--model", str(tmp_path)) as base:
        too_long = httpx.post(f"{base}/get_reward", json={"query": ["a " * 300]}, timeout=30)
        after = httpx.post(f"{base}/get_reward", json={"query": ["abc"]}, timeout=30)
        health = httpx.get(f"{base}/health", timeout=30)
    assert too_long.status_code == 500, "more positions than the model has fail its forward"
    assert "scoring failed: RuntimeError: " in too_long.json()["detail"]
    assert after.status_code == 200 and len(after.json()["rewards"]) == 1
    assert health.json()["status"] == "ok" and health.json()["failed"] == 1


def test_an_openrlhf_reward_model_is_served(tmp_path: Path) -> None:
    build_openrlhf_reward_model(tmp_path, mean=0.5, std=2.0)
    with serve_rm("--model", str(tmp_path)) as base:
        one = httpx.post(f"{base}/get_reward", json={"query": ["Hello"]}, timeout=60).json()
        two = httpx.post(
            f"{base}/get_reward", json={"query": ["Hello", "Count down with me."]}, timeout=60
        ).json()
        health = httpx.get(f"{base}/health", timeout=30).json()
    assert health["scorer"] == f"OpenRLHF reward model {tmp_path}"
    assert len(two["rewards"]) == 2 and two["rewards"][0] == pytest.approx(
        one["rewards"][0], abs=1e-5
    )
