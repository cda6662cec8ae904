"""The serve-rm server, in process: what a client is told about its request, and which model
directories it serves."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agenthub import AgentHubError, RewardFuncError
from agenthub.envs.judge._rm_server import BadRequest, Scorer, build_app, parse_request
from agenthub.envs.reward_func import RewardFunction, RewardOutput
from tests.tiny_model import build_model, build_openrlhf_reward_model, build_sequence_classifier


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


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"query": ""}', "'query' must be a list of strings, not a string"),
        ('{"query": {"q": "a"}}', "'query' must be a list of strings, not an object"),
        ('{"query": ["a", 1]}', "'query' must be a list of strings; item 1 is a number"),
        (
            '{"query": ["a"], "prompts": [null]}',
            "'prompts' must be a list of strings; item 0 is null",
        ),
        (
            '{"query": ["a"], "labels": "a"}',
            "'labels' must be a list with one item per query (1), got a string",
        ),
    ],
)
def test_a_field_of_the_wrong_kind_is_told_what_was_sent(body: str, message: str) -> None:
    with pytest.raises(BadRequest) as raised:
        parse_request(body.encode())
    assert str(raised.value) == message


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


class _FailsOnce:
    """A scorer whose first batch raises (as a model's forward pass can), and later ones work."""

    def __init__(self, error: BaseException) -> None:
        self.error: BaseException | None = error

    def __call__(self, queries: list[str], prompts: list[str], labels: list[Any]) -> RewardOutput:
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return RewardOutput(rewards=[float(len(q)) for q in queries])


@pytest.mark.timeout(30)
def test_a_scorer_exception_fails_its_request_with_the_reason_and_the_server_keeps_scoring() -> (
    None
):
    scorer = _FailsOnce(ValueError("Cannot handle batch sizes > 1 if no padding token is defined."))
    with TestClient(build_app(scorer, name="flaky")) as client:
        failed = client.post("/get_reward", json={"query": ["ab", "c"]})
        later = client.post("/get_reward", json={"query": ["ab", "c"]})
        health = client.get("/health")
    assert failed.status_code == 500
    assert failed.json()["detail"] == (
        "scoring failed: ValueError: Cannot handle batch sizes > 1 if no padding token is "
        "defined. (the server's log has the traceback)"
    )
    assert later.status_code == 200 and later.json() == {"rewards": [2.0, 1.0]}
    assert health.status_code == 200
    assert health.json()["status"] == "ok" and health.json()["failed"] == 1


@pytest.mark.timeout(30)
def test_a_reward_function_error_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scorer = _FailsOnce(RewardFuncError("reward_func.py raised on query 0: KeyError: 'answer'"))
    with TestClient(build_app(scorer, name="flaky")) as client:
        failed = client.post("/get_reward", json={"query": ["ab"]})
    assert failed.json()["detail"] == (
        "scoring failed: reward_func.py raised on query 0: KeyError: 'answer'"
    )
    [record] = [r for r in caplog.records if r.name == "agenthub.serve_rm"]
    assert record.exc_info is not None and record.exc_info[0] is RewardFuncError


class _Crash(BaseException):
    """Not an `Exception`: what no scorer is expected to raise."""


@pytest.mark.timeout(30)
def test_a_server_whose_scoring_loop_stopped_says_so_instead_of_claiming_health() -> None:
    with TestClient(build_app(_FailsOnce(_Crash("worker gone")), name="crashing")) as client:
        failed = client.post("/get_reward", json={"query": ["a"]})
        later = client.post("/get_reward", json={"query": ["a"]})
        health = client.get("/health")
    reason = "the scoring loop stopped on _Crash: worker gone; restart agenthub serve-rm"
    assert (failed.status_code, failed.json()) == (503, {"detail": f"scoring failed: {reason}"})
    assert (later.status_code, later.json()) == (503, {"detail": f"scoring failed: {reason}"})
    assert health.status_code == 503
    assert health.json()["status"] == "stopped" and health.json()["reason"] == reason


class _RefusesBad:
    """Scores each query by its length and raises for a batch holding "bad"; the first batch
    waits for `gate`, so the requests sent meanwhile queue up and are batched together."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def __call__(self, queries: list[str], prompts: list[str], labels: list[Any]) -> RewardOutput:
        self.gate.wait(10)
        if "bad" in queries:
            raise ValueError("cannot score 'bad'")
        return RewardOutput(rewards=[float(len(q)) for q in queries])


@pytest.mark.timeout(30)
def test_a_failing_request_does_not_fail_the_requests_batched_with_it() -> None:
    scorer = _RefusesBad()
    answers: dict[str, Any] = {}
    with TestClient(build_app(scorer, name="refuses bad")) as client:

        def post(query: str) -> None:
            answers[query] = client.post("/get_reward", json={"query": [query]})

        threads = [threading.Thread(target=post, args=(q,)) for q in ("first", "good", "bad")]
        threads[0].start()
        while client.get("/health").json()["batches"] < 1:
            time.sleep(0.01)
        for thread in threads[1:]:
            thread.start()
        while client.get("/health").json()["requests"] < 3:
            time.sleep(0.01)
        scorer.gate.set()
        for thread in threads:
            thread.join(10)
        health = client.get("/health").json()
    assert answers["first"].json() == {"rewards": [5.0]}
    assert answers["good"].json() == {"rewards": [4.0]}
    assert answers["bad"].status_code == 500
    assert "ValueError: cannot score 'bad'" in answers["bad"].json()["detail"]
    assert health["batches"] == 4, "first, then good and bad together, then each alone"


class _Meets:
    """A scorer whose calls wait for `parties` of them to be running at once."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=5)

    def __call__(self, queries: list[str], prompts: list[str], labels: list[Any]) -> RewardOutput:
        self.barrier.wait()
        return RewardOutput(rewards=[1.0] * len(queries))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("concurrency", [1, 2])
def test_batches_are_scored_as_many_at_once_as_there_are_workers(concurrency: int) -> None:
    # max_batch_size=1 keeps the two requests in two batches.
    app = build_app(_Meets(2), name="meets", max_batch_size=1, concurrency=concurrency)
    answers: list[int] = []
    with TestClient(app) as client:
        posts = [
            threading.Thread(
                target=lambda: answers.append(
                    client.post("/get_reward", json={"query": ["a"]}).status_code
                )
            )
            for _ in range(2)
        ]
        for post in posts:
            post.start()
        for post in posts:
            post.join(30)
    # One at a time, the first call waits for a second that cannot start, and breaks the
    # barrier for both.
    assert sorted(answers) == ([200, 200] if concurrency == 2 else [500, 500])


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Scorer:
    """A tiny sequence classifier whose tokenizer and config name no pad token."""
    pytest.importorskip("transformers", reason="serving a model needs the train extra")
    from agenthub.envs.judge._rm_model import SequenceClassifierScorer

    return SequenceClassifierScorer(str(build_sequence_classifier(tmp_path_factory.mktemp("m"))))


def test_a_model_whose_config_names_no_pad_token_scores_batches(classifier: Scorer) -> None:
    alone = classifier(["Hello"], [""], [None]).rewards
    batched = classifier(["Hello", "Count down with me"], ["", ""], [None, None]).rewards
    assert len(batched) == 2 and batched[0] == pytest.approx(alone[0], abs=1e-5)


def _logged(queries: list[str], prompts: list[str], labels: list[Any]) -> dict[str, Any]:
    rewards = [float(len(q)) for q in queries]
    return {"rewards": rewards, "scores": rewards, "extra_logs": {"length": rewards}}


@pytest.mark.parametrize(
    ("function", "answer"),
    [
        (_nonempty, {"rewards": []}),
        (_logged, {"rewards": [], "scores": [], "extra_logs": {"length": []}}),
    ],
)
def test_an_empty_batch_gets_the_fields_a_sample_would_get_empty(
    function: Any, answer: dict[str, Any]
) -> None:
    # OpenRLHF splits a batch over several servers; with fewer samples than servers, some get
    # none, and an error there loses the rewards of the whole batch.
    scorer = RewardFunction(function)
    app = build_app(scorer, name="empty", needs_labels=scorer.takes_labels)
    with TestClient(app) as client:
        got = client.post("/get_reward", json={"query": [], "prompts": [], "labels": []})
        bare = client.post("/get_reward", json={"query": []})  # no labels to send for none
    assert got.status_code == 200 and got.json() == answer
    assert bare.status_code == 200 and bare.json() == answer


def test_a_model_scores_an_empty_batch_as_no_rewards(classifier: Scorer) -> None:
    assert classifier([], [], []) == RewardOutput(rewards=[])


def test_a_model_scores_an_empty_query_alone_as_it_does_batched(classifier: Scorer) -> None:
    # The tiny model's tokenizer adds no BOS token: alone, "" is a batch of no tokens at all.
    with TestClient(build_app(classifier, name="model")) as client:
        alone = client.post("/get_reward", json={"query": [""]})
        batched = client.post("/get_reward", json={"query": ["", "Hello"]})
    assert alone.status_code == 200, alone.text
    assert alone.json()["rewards"] == pytest.approx(batched.json()["rewards"][:1], abs=1e-5)


def test_a_model_whose_reward_head_would_start_random_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="serving a model needs the train extra")
    from agenthub.envs.judge._rm_model import SequenceClassifierScorer

    build_model(tmp_path, layers=1)  # a language model: an lm_head, no reward head
    with pytest.raises(AgentHubError) as raised:
        SequenceClassifierScorer(str(tmp_path))
    assert str(raised.value) == (
        f"{tmp_path}: the checkpoint has no weights for score.weight of "
        "Qwen2ForSequenceClassification (it has lm_head.weight, which "
        "Qwen2ForSequenceClassification does not use), so they would start random and so "
        "would the rewards; give a sequence-classification model trained as a reward model, "
        "or one in OpenRLHF's layout (value_head.weight, saved as safetensors)"
    )


def _read_alone(base: Any, head: Any, tokenizer: Any, query: str) -> float:
    """What OpenRLHF's reward model gives `query` scored alone: its value head at the query's
    last token, the eos token it was trained to end on."""
    import torch

    ids = tokenizer(query + tokenizer.eos_token, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return float(head(base(input_ids=ids).last_hidden_state[0, -1]))


def test_an_openrlhf_reward_model_is_read_at_its_value_head(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="serving a model needs the train extra")
    from transformers import AutoTokenizer

    from agenthub.envs.judge._rm_model import ValueHeadScorer, load_model_scorer

    base, head = build_openrlhf_reward_model(tmp_path)
    scorer = load_model_scorer(str(tmp_path))
    assert isinstance(scorer, ValueHeadScorer)
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    short, long = "Hello", "Count down with me. Start at 3."
    got = scorer([short, long, short + "<|im_end|>"], [""] * 3, [None] * 3).rewards
    expected = [_read_alone(base, head, tokenizer, q) for q in (short, long, short)]
    assert got == pytest.approx(expected, abs=1e-5), (
        "padding and an eos already there change nothing"
    )
    assert expected[0] != pytest.approx(expected[1], abs=1e-3)


def test_an_openrlhf_reward_model_trained_to_normalize_is_normalized(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="serving a model needs the train extra")
    from transformers import AutoTokenizer

    from agenthub.envs.judge._rm_model import load_model_scorer

    base, head = build_openrlhf_reward_model(tmp_path, mean=0.5, std=2.0)
    alone = _read_alone(base, head, AutoTokenizer.from_pretrained(str(tmp_path)), "Hello")
    got = load_model_scorer(str(tmp_path))(["Hello"], [""], [None]).rewards
    assert got == pytest.approx([(alone - 0.5) / 2.0], abs=1e-5)
