"""`agenthub train` on a CUDA GPU in the colocated layout (`make test-gpu`; deselected
elsewhere): the learner and the rollout engine share the GPU, the engine sleeping through each
learner step and taking the new weights over CUDA IPC. A random model of Qwen2.5-0.5B's body
(24 layers of 896, 14 heads; the test tokenizer's vocabulary, so every sampled id decodes)
trains 5 steps on `math`; every step is logged, the policy version moves each step, and the
GPU's peak memory stays within it (no out-of-memory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the trainer needs the train extra")
transformers = pytest.importorskip("transformers", reason="the trainer needs the train extra")

from tests.tiny_model import QWEN25_05B_BODY, build_tokenizer  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.gpu, pytest.mark.timeout(1800)]


def _model(out: Path) -> Path:
    build_tokenizer(out)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        **QWEN25_05B_BODY,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    return out


def test_five_colocated_steps_train_and_sync_on_one_gpu(tmp_path: Path) -> None:
    if not torch.cuda.is_available():
        pytest.fail("the GPU tests need a CUDA device: run them with `make test-gpu` on one")
    model = _model(tmp_path / "model")
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env |= {"WANDB_SILENT": "true", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agenthub",
            "train",
            "--env",
            "math",
            "--model",
            str(model),
            "--out",
            str(out),
            "ray.colocate=true",
            "run.max_steps=5",
            "run.wandb=disabled",
            "run.checkpoint_every=5",
            "rollout.n_samples_per_prompt=4",
            "rollout.max_reply_tokens=64",
            "algorithm.batch_groups=4",
            "algorithm.max_staleness=1",
            "eval.every=0",
        ],
        capture_output=True,
        text=True,
        timeout=1700,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "train/reward" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert all(r["learner/sync_s"] > 0 for r in steps[1:]), "each step's weights were synced"
