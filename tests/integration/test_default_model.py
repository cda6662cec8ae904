"""The default model against the real consumers: vLLM (the CPU build, in-process in a child
Python) loads and generates from a built directory; `agenthub model init` builds the real default
into the cache that every later command reads (and the session's `vllm serve` serves)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agenthub.agents.default_model import MANIFEST, DefaultModelConfig, build_default_model
from tests.unit._demo_envs import register_demo_envs

pytestmark = pytest.mark.integration
pytest.importorskip("vllm", reason="the vLLM integration tests need the cpu or gpu extra")

VLLM_PROBE = textwrap.dedent(
    """
    import json, sys
    from vllm import LLM, SamplingParams

    llm = LLM(model=sys.argv[1], dtype="float32", max_model_len=512, seed=0,
              enforce_eager=True, max_num_seqs=4)
    tokenizer = llm.get_tokenizer()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": sys.argv[2]}], add_generation_prompt=True, tokenize=False)
    params = SamplingParams(temperature=0.0, max_tokens=48, logprobs=1)
    out = llm.generate([prompt], params)[0].outputs[0]
    print("RESULT", json.dumps({"text": out.text, "token_ids": list(out.token_ids),
                      "finish_reason": out.finish_reason,
                      "vocab": len(tokenizer), "eos": tokenizer.eos_token_id}), flush=True)
    """
)


def vllm_generate(model: Path, question: str) -> dict[str, object]:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(
        [sys.executable, "-c", VLLM_PROBE, str(model), question],
        capture_output=True,
        text=True,
        timeout=540,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout[-4000:]
    reply: dict[str, object] = json.loads(lines[-1].removeprefix("RESULT "))
    print(reply)
    return reply


@pytest.mark.timeout(600)
def test_vllm_loads_a_built_model_and_generates(tmp_path: Path) -> None:
    register_demo_envs()
    config = DefaultModelConfig(
        env_ids=("test_arith",), demos_per_env=64, vocab_size=400, sft_steps=2, batch_size=4
    )
    model = build_default_model(tmp_path / "model", config)
    reply = vllm_generate(model, "What is 2 + 3?")
    token_ids = reply["token_ids"]
    assert isinstance(token_ids, list) and token_ids
    assert all(0 <= t < int(str(reply["vocab"])) for t in token_ids)
    assert reply["finish_reason"] in ("stop", "length")


@pytest.mark.timeout(900)
def test_model_init_builds_the_real_default_that_vllm_serves() -> None:
    # Builds into the user's cache on purpose: later commands and tests use this model.
    result = subprocess.run(
        [sys.executable, "-m", "agenthub", "model", "init"],
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    path = Path(result.stdout.strip().splitlines()[-1])
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["config"] == DefaultModelConfig().model_dump(mode="json")
    assert manifest["sft_loss"]["last"] < manifest["sft_loss"]["first"]
    # vLLM serving this very build (the cache every command reads) is the session's shared
    # `vllm serve` (tests/integration/conftest.py), which test_openai_engine.py checks token by
    # token; loading a built directory into vLLM is the test above.
    from agenthub.agents.default_model import ensure_default_model

    assert ensure_default_model() == path
