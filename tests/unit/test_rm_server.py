"""The serve-rm HTTP server, in process: what a client is told about its request."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from agenthub.envs.judge._rm_server import BadRequest, build_app, parse_request
from agenthub.envs.reward_func import RewardFunction


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('["a"]', 'the body must be a JSON object {"query": [...], '),
        ('["a"]', "not an array"),
        ('"a"', "not a string"),
        ("null", "not null"),
        ('{"quer": ["a"]}', "missing field 'query' (fields sent: 'quer'); send {\"query\""),
        ("{}", "missing field 'query' (fields sent: none)"),
    ],
)
def test_a_body_without_a_query_list_is_told_what_is_missing(body: str, message: str) -> None:
    with pytest.raises(BadRequest) as raised:
        parse_request(body.encode())
    assert message in str(raised.value)


def _label_in_query(queries: list[str], prompts: list[str], labels: list[Any]) -> list[float]:
    return [float(label in q) for q, label in zip(queries, labels, strict=True)]


def _nonempty(queries: list[str], prompts: list[str]) -> list[float]:
    return [float(bool(q)) for q in queries]


def test_a_reward_function_that_takes_labels_needs_them_sent() -> None:
    function = RewardFunction(_label_in_query)
    app = build_app(function, name="labels", needs_labels=function.takes_labels)
    with TestClient(app) as client:
        missing = client.post("/get_reward", json={"query": ["2+3=5", "2+2=5"]})
        sent = client.post("/get_reward", json={"query": ["2+3=5", "2+2=5"], "labels": ["5", "4"]})
    assert missing.status_code == 422
    assert missing.json()["detail"] == (
        "missing field 'labels': this reward function takes labels; send one per query (2)"
    )
    assert sent.status_code == 200 and sent.json() == {"rewards": [1.0, 0.0]}


def test_labels_stay_optional_for_a_scorer_that_does_not_read_them() -> None:
    function = RewardFunction(_nonempty)
    assert not function.takes_labels
    with TestClient(build_app(function, name="no labels")) as client:
        answer = client.post("/get_reward", json={"query": ["a", ""]})
    assert answer.status_code == 200 and answer.json() == {"rewards": [1.0, 0.0]}
