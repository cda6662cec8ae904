"""The train/inference gap between the vLLM CPU engine and the DeepSpeed learner, both fp32, on
the embedded default model: on a freshly synced policy only numerics differ, and they differ
little; one learner step later the same tokens are stale and the gap is orders larger.

Measured (benchmarks/train_inference_gap.py, 2 cores, fp32): at staleness 0 a mean of 3.5e-7
and a max of 1.1e-5 nats over 24 replies of up to 32 tokens; at staleness 1 a mean of 0.36.
The bounds leave a wide margin for other CPUs' kernels."""

from pathlib import Path

import pytest

pytest.importorskip("deepspeed", reason="the learner needs the train extra")
pytest.importorskip("vllm", reason="the engine needs vLLM")

from tests.integration.trainer.gap_probe import gaps_by_staleness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

FRESH_MEAN_BOUND = 1e-5
FRESH_MAX_BOUND = 1e-3


def test_a_freshly_synced_policy_has_a_tiny_gap_and_a_stale_one_a_large_gap() -> None:
    from agenthub.agents.default_model import ensure_default_model

    gaps = gaps_by_staleness(Path(ensure_default_model()), [0, 1])
    fresh, stale = gaps[0], gaps[1]
    assert fresh["gap/stale_tokens"] == 0.0 and "gap/stale_mean" not in fresh
    assert fresh["gap/current_mean"] < FRESH_MEAN_BOUND, fresh
    assert fresh["gap/current_max"] < FRESH_MAX_BOUND, fresh
    assert stale["gap/stale_tokens"] == 1.0
    assert stale["gap/stale_mean"] > 100 * fresh["gap/current_mean"], (fresh, stale)
