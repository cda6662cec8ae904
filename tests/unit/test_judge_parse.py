"""Reading a score out of an LLM judge's reply, and the judge env's arguments."""

from __future__ import annotations

import pytest

from agenthub import make
from agenthub.envs.judge import DEFAULT_RUBRIC, JudgeError, LLMJudge, parse_judgement


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ('{"score": 7, "reason": "ok"}', 7.0),
        ('Thinking... {"note": 1} then {"score": 8.5, "reason": "x"}', 8.5),
        ('```json\n{"score": 3}\n```', 3.0),
        ("Score: 4", 4.0),
        ("**Score**: 6\nbecause", 6.0),
        ("final score = 10", 10.0),
        ('{"score": "9"}', 9.0),
    ],
)
def test_scores_are_read_from_json_or_a_score_line(reply: str, score: float) -> None:
    assert parse_judgement(reply, min_score=0, max_score=10).score == score


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("I liked it a lot.", "holds no score"),
        ("", "holds no score"),
        ('{"score": "high"}', "holds no score"),
        ('{"score": true}', "holds no score"),
        ('{"score": 11}', r"score 11, outside \[0, 10\]"),
        ("score: -1", "outside"),
    ],
)
def test_unusable_replies_are_errors_not_zero(reply: str, message: str) -> None:
    with pytest.raises(JudgeError, match=message):
        parse_judgement(reply, min_score=0, max_score=10)


def test_rubric_fills_only_its_placeholders() -> None:
    judge = LLMJudge("http://127.0.0.1:9/v1", "m", min_score=1, max_score=5)
    text = judge.render("What is {x}?", "x is {y}", "")
    assert "What is {x}?" in text and "x is {y}" in text and "from 1 to 5" in text
    assert '{"score": <number>' in text and "{prompt}" in DEFAULT_RUBRIC


def test_exactly_one_judge_is_required() -> None:
    with pytest.raises(ValueError, match="exactly one of judge_url"):
        make("judge")
    with pytest.raises(ValueError, match="exactly one of judge_url"):
        make("judge", judge_url="http://x/v1", judge_model="m", rm_url="http://y")
    with pytest.raises(ValueError, match="judge_model"):
        make("judge", judge_url="http://x/v1")
