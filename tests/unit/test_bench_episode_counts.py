"""How `benchmarks/vs_verifiers.py` counts failed episodes: the same rule for both sides, a
failed episode in the wall time but not among the completed ones. (Against verifiers' real
per-rollout error record: inside_verifiers.py.)"""

from __future__ import annotations

import pytest

from benchmarks._episode_counts import (
    SideRun,
    add_failures,
    describe_failures,
    steady_rate,
    verifiers_failures,
    whole_rate,
)


def _error_data(name: str) -> dict[str, str]:
    """The shape of verifiers' `ErrorData` in a rollout's output."""
    return {
        "error": name,
        "message": "Model returned no content and did not call any tools",
        "error_chain_repr": f"{name}('Model returned no content')",
        "error_chain_str": name,
    }


def test_verifiers_rollouts_that_recorded_an_error_count_by_its_class() -> None:
    outputs = [
        {"completion": [], "error": _error_data("EmptyModelResponseError")},
        {"completion": [{"role": "assistant", "content": "red"}]},
        {"completion": [], "error": None},
        {"completion": [], "error": _error_data("EmptyModelResponseError")},
        {"completion": [], "error": _error_data("ToolParseError")},
    ]
    assert verifiers_failures(outputs) == {"EmptyModelResponseError": 2, "ToolParseError": 1}
    assert verifiers_failures([{"completion": []}]) == {}


def test_failed_episodes_count_in_the_time_but_not_as_completed() -> None:
    clean = SideRun(episodes=96, seconds=12.0)
    failing = SideRun(episodes=96, seconds=12.0, failed={"EmptyModelResponseError": 24})
    assert (clean.completed, failing.completed) == (96, 72)
    assert whole_rate(clean) == 8.0
    assert whole_rate(failing) == 6.0, "the same seconds, three quarters of the episodes"


def test_the_steady_rate_takes_the_completed_share_of_the_episodes_beyond_the_first() -> None:
    one = SideRun(episodes=1, seconds=6.0)
    many = SideRun(episodes=96, seconds=25.0, failed={"env_error": 24})
    # 95 episodes more in 19 s more, 75% of them completed
    assert steady_rate(one, many) == pytest.approx(95 * 0.75 / 19)
    one_failed = SideRun(episodes=1, seconds=6.0, failed={"EmptyModelResponseError": 1})
    assert steady_rate(one_failed, many) == steady_rate(one, many), "start-up, not the rate"


def test_failures_are_described_and_added_by_cause() -> None:
    runs = [
        SideRun(episodes=1, seconds=1.0),
        SideRun(episodes=96, seconds=9.0, failed={"EmptyModelResponseError": 2}),
        SideRun(episodes=96, seconds=9.0, failed={"EmptyModelResponseError": 1, "env_error": 1}),
    ]
    total = add_failures(runs)
    assert total == {"EmptyModelResponseError": 3, "env_error": 1}
    assert describe_failures(total) == "4 (EmptyModelResponseError x3, env_error x1)"
    assert describe_failures({}) == describe_failures({"env_error": 0}) == "none"


def test_more_failures_than_episodes_is_refused() -> None:
    with pytest.raises(ValueError, match="3 failed episodes of 2 played"):
        SideRun(episodes=2, seconds=1.0, failed={"env_error": 3})
