"""The serve-rm HTTP server, in process: what a client is told about its request."""

from __future__ import annotations

import pytest

from agenthub.envs.judge._rm_server import BadRequest, parse_request


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
