"""The train/inference gap a learner step reports, and the adaptive KL weight, against
computations by hand."""

import math

import pytest

torch = pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.trainer import TrainBatch, importance_weights  # noqa: E402
from agenthub.trainer._importance import GapMeter  # noqa: E402
from agenthub.trainer._loss import KLController  # noqa: E402

# Three sequences of five tokens; token 0 is never a model token. Row 0 was sampled by the
# learner's current policy (version 3), row 1 half by version 3 and half by version 2, row 2
# by version 1 and far off: every ratio is e^2.
OLD = [
    [0.0, -1.0, -2.0, -0.5, -1.5],
    [0.0, -0.2, -3.0, -1.0, -0.1],
    [0.0, -1.0, -1.0, -1.0, -1.0],
]
ROLLOUT = [
    [0.0, -1.1, -1.9, -0.5, -1.5],
    [0.0, -0.2, -2.0, -1.5, -0.1],
    [0.0, -3.0, -3.0, -3.0, -3.0],
]
MASK = [[0, 1, 1, 0, 1], [0, 1, 1, 1, 1], [0, 1, 1, 1, 1]]
VERSIONS = [[3, 3, 3, 3, 3], [2, 2, 2, 3, 3], [1, 1, 1, 1, 1]]
CURRENT_VERSION = 3


def measured(mode: str, rows: slice = slice(None)) -> dict[str, float]:
    old, rollout = torch.tensor(OLD)[rows], torch.tensor(ROLLOUT)[rows]
    mask = torch.tensor(MASK)[rows]
    current = torch.tensor(VERSIONS)[rows] == CURRENT_VERSION
    meter = GapMeter()
    meter.add(old, rollout, mask, importance_weights(old, rollout, mask, mode, 0.5, 5.0), current)
    return meter.metrics()


def test_the_gap_is_split_into_current_and_stale_tokens() -> None:
    # By hand, over model tokens: row 0 (current) |0.1|, |0.1|, |0|; row 1 stale |0|, |1.0|,
    # current |0.5|, |0|; row 2 stale 2.0 x 4.
    got = measured("tis")
    assert got["gap/mean"] == pytest.approx((0.1 + 0.1 + 0 + 0 + 1.0 + 0.5 + 0 + 8.0) / 11)
    assert got["gap/max"] == pytest.approx(2.0)
    assert got["gap/current_mean"] == pytest.approx((0.1 + 0.1 + 0 + 0.5 + 0) / 5)
    assert got["gap/current_max"] == pytest.approx(0.5)
    assert got["gap/stale_mean"] == pytest.approx((0 + 1.0 + 8.0) / 6)
    assert got["gap/stale_max"] == pytest.approx(2.0)
    assert got["gap/stale_tokens"] == pytest.approx(6 / 11)


@pytest.mark.parametrize(
    ("mode", "clipped", "masked", "masked_sequences"),
    [
        # Outside [0.5, 5]: row 1 token 2 (ratio e^-1 = 0.37) and all of row 2 (e^2 = 7.4).
        ("tis", 5 / 11, 0.0, 0.0),
        ("icepop", 0.0, 5 / 11, 1 / 3),
        # Row 2's geometric-mean ratio is e^2: the whole sequence goes; row 1's is e^-0.125,
        # so it stays, with its token 2 clamped.
        ("seq-mask-tis", 1 / 11, 4 / 11, 1 / 3),
        ("none", 0.0, 0.0, 0.0),
    ],
)
def test_clipped_and_masked_tokens_and_sequences_are_counted(
    mode: str, clipped: float, masked: float, masked_sequences: float
) -> None:
    got = measured(mode)
    assert got["is_clipped"] == pytest.approx(clipped)
    assert got["is_masked"] == pytest.approx(masked)
    assert got["is_masked_sequences"] == pytest.approx(masked_sequences)


def test_micro_batches_add_up_to_the_whole_batch() -> None:
    whole = measured("icepop")
    meter = GapMeter()
    for rows in (slice(0, 1), slice(1, 3)):
        old, rollout = torch.tensor(OLD)[rows], torch.tensor(ROLLOUT)[rows]
        mask = torch.tensor(MASK)[rows]
        iw = importance_weights(old, rollout, mask, "icepop", 0.5, 5.0)
        meter.add(old, rollout, mask, iw, torch.tensor(VERSIONS)[rows] == CURRENT_VERSION)
    assert meter.metrics() == pytest.approx(whole)


def test_without_versions_or_stale_tokens_only_what_is_known_is_reported() -> None:
    old, rollout, mask = torch.tensor(OLD), torch.tensor(ROLLOUT), torch.tensor(MASK)
    meter = GapMeter()
    meter.add(old, rollout, mask, importance_weights(old, rollout, mask, "tis"))
    assert not any(k.startswith(("gap/current", "gap/stale")) for k in meter.metrics())
    fresh = measured("tis", slice(0, 1))
    assert fresh["gap/stale_tokens"] == 0.0
    assert "gap/stale_mean" not in fresh and fresh["gap/current_max"] == pytest.approx(0.1)


def test_collated_policy_versions_follow_their_rows_into_micro_batches() -> None:
    b = TrainBatch.collate(
        [[1, 2, 3], [4, 5, 6, 7, 8]],
        [[0, 1, 1], [0, 1, 1, 0, 1]],
        [[0.0] * 3, [0.0] * 5],
        [1.0, -1.0],
        policy_versions=[[4, 4, 5], [5, 5, 5, 5, 5]],
    )
    assert b.policy_versions is not None
    assert b.policy_versions.tolist() == [[4, 4, 5, -1, -1], [5, 5, 5, 5, 5]]
    first, second = b.micro_batches(1)
    assert first.policy_versions is not None and second.policy_versions is not None
    assert first.policy_versions.tolist() == [[5, 5, 5, 5, 5]]
    assert second.policy_versions.tolist() == [[4, 4, 5]]
    with pytest.raises(ValueError, match="policy versions differ in length"):
        TrainBatch.collate([[1, 2]], [[0, 1]], [[0.0, 0.0]], [1.0], policy_versions=[[0]])


def openrlhf_adaptive(coef: float, target: float, horizon: int, kls: list[float], n: int):  # type: ignore[no-untyped-def]
    """OpenRLHF's `AdaptiveKLController.update` (Ziegler et al. 2019), written out."""
    values = []
    for kl in kls:
        proportional_error = min(max(kl / target - 1, -0.2), 0.2)
        coef = coef * (1 + proportional_error * n / horizon)
        values.append(coef)
    return values


def test_the_adaptive_kl_weight_follows_openrlhf_s_update_rule() -> None:
    kls = [0.0, 0.01, 0.05, 0.2, 0.5, 0.06, 0.04, 1e-4]
    controller = KLController(0.01, target=0.05, horizon=1000)
    got = []
    for kl in kls:
        controller.update(kl, 64)
        got.append(controller.value)
    assert got == pytest.approx(openrlhf_adaptive(0.01, 0.05, 1000, kls, 64), rel=1e-12)
    # Above target it grows, below it shrinks, by at most a 0.2 proportional error per sample.
    assert got[3] > got[2] and got[0] < 0.01
    assert got[4] / got[3] == pytest.approx(1 + 0.2 * 64 / 1000)


def test_without_a_target_the_kl_weight_stays_fixed() -> None:
    controller = KLController(0.02)
    for kl in (0.0, 1.0, 100.0):
        controller.update(kl, 512)
    assert controller.value == 0.02
    with pytest.raises(ValueError, match="KL target must be positive"):
        KLController(0.01, target=0.0)
    with pytest.raises(ValueError, match="horizon must be at least 1"):
        KLController(0.01, target=0.1, horizon=0)


def test_a_kl_target_reached_holds_the_weight() -> None:
    controller = KLController(0.1, target=0.05, horizon=10000)
    controller.update(0.05, 256)
    assert controller.value == pytest.approx(0.1)
    assert math.isfinite(controller.value)
