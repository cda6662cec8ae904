"""`agenthub serve`'s app: OpenEnv's protocol over sessions, and every bad input it meets.
Run on starlette's TestClient; OpenEnv's own client plays it in
tests/integration/hubs/test_serve_openenv.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import anyio
import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

import agenthub
from agenthub import Env, Step, Task
from agenthub.cli import main
from agenthub.cli._serve import _banner
from agenthub.integrations.openenv_server import ServeConfig, ServedObservation, build_app

pytestmark = pytest.mark.timeout(60)

PROBE = "tests.unit.test_serve:ProbeEnv"


class ProbeEnv(Env[str]):
    """Text env whose actions choose what it does: `raise`, `hang`, `end`, else one more
    turn. Every instance not yet closed is in `open`."""

    open: ClassVar[set[int]] = set()
    system_prompt = "Say end."

    def __init__(self, *, close_raises: bool = False) -> None:
        self._close_raises = close_raises
        ProbeEnv.open.add(id(self))

    def tasks(self, split: str = "train") -> Iterable[Task]:
        return [Task(id=f"{split}/{i}", prompt=f"task {i}") for i in range(3)]

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return f"begin {task.id}", {}

    async def step(self, action: str) -> Step[str]:
        if action == "raise":
            raise ValueError("the probe broke")
        if action == "hang":
            await anyio.sleep_forever()
        return Step("bye" if action == "end" else "again", 1.0, terminated=action == "end")

    async def aclose(self) -> None:
        ProbeEnv.open.discard(id(self))
        if self._close_raises:
            raise OSError("closing failed")


@pytest.fixture(autouse=True)
def _no_env_left_open() -> Iterator[None]:
    ProbeEnv.open.clear()
    yield
    assert not ProbeEnv.open, "an env instance was left open"


def served(**config: Any) -> TestClient:
    return TestClient(build_app(ServeConfig(**{"env_id": PROBE, **config})))


def sessions(client: TestClient) -> int:
    return len(client.app.state.pool)  # type: ignore[attr-defined]


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.01)


def test_openenv_routes_describe_the_env() -> None:
    with served() as client:
        assert client.get("/health").json() == {"status": "healthy"}
        schema = client.get("/schema").json()
        assert set(schema) == {"action", "observation", "state"}
        assert schema["action"]["required"] == ["message"]
        metadata = client.get("/metadata").json()
        assert metadata["name"] == PROBE and metadata["description"].startswith("Text env")


def test_math_plays_over_the_websocket_as_openenv_frames() -> None:
    task = next(iter(agenthub.make("math").tasks("train")))
    with (
        TestClient(build_app(ServeConfig(env_id="math"))) as client,
        client.websocket_connect("/ws") as ws,
    ):
        ws.send_json({"type": "reset", "data": {"seed": 3, "task_index": 0}})
        opened = ws.receive_json()
        assert opened["type"] == "observation" and opened["data"]["done"] is False
        assert opened["data"]["observation"]["prompt"][-1]["content"] == task.prompt
        ws.send_json({"type": "step", "data": {"message": f"\\boxed{{{task.label}}}"}})
        answer = ws.receive_json()["data"]
        for said in (opened["data"], answer):  # what /schema publishes
            ServedObservation.model_validate(said["observation"])
        assert (answer["reward"], answer["done"]) == (1.0, True)
        assert answer["observation"]["score"] == 1.0 and answer["observation"]["terminated"]
        ws.send_json({"type": "state"})
        assert ws.receive_json()["data"]["step_count"] == 1


def test_a_text_env_s_answer_is_text_and_resets_go_round_its_tasks() -> None:
    with served() as client, client.websocket_connect("/ws") as ws:
        seen = []
        for _ in range(4):
            ws.send_json({"type": "reset"})
            observation = ws.receive_json()["data"]["observation"]
            seen.append(observation["text"])
        assert seen == ["begin train/0", "begin train/1", "begin train/2", "begin train/0"]
        assert observation["prompt"][0] == {"role": "system", "content": "Say end."}
        ws.send_json({"type": "reset", "data": {"task": {"id": "mine", "prompt": "p"}}})
        assert ws.receive_json()["data"]["observation"]["text"] == "begin mine"


def test_an_http_session_runs_from_reset_to_close() -> None:
    with served() as client:
        reset = client.post("/reset", json={"split": "held_out", "task_index": 2}).json()
        session_id = reset["metadata"]["session_id"]
        assert reset["observation"]["text"] == "begin held_out/2"
        step = client.post("/step", json={"session_id": session_id, "action": {"message": "x"}})
        assert step.json()["observation"]["text"] == "again"
        state = client.get("/state", params={"session_id": session_id}).json()
        assert state["step_count"] == 1 and state["task_id"] == "held_out/2"
        again = client.post("/reset", json={"session_id": session_id})
        assert again.json()["metadata"]["session_id"] == session_id and sessions(client) == 1
        assert client.post("/close", json={"session_id": session_id}).status_code == 200
        assert sessions(client) == 0
        gone = client.post("/step", json={"session_id": session_id, "action": {"message": "x"}})
        assert gone.status_code == 404 and "unknown session" in gone.json()["detail"]


def test_bad_http_requests_get_a_4xx_that_says_what_to_do() -> None:
    with served() as client:
        no_session = client.post("/step", json={"action": {"message": "x"}})
        assert no_session.status_code == 400 and "POST /reset first" in no_session.json()["detail"]
        unknown = client.get("/state", params={"session_id": "nope"})
        assert unknown.status_code == 404
        malformed = client.post("/reset", content=b"{not json")
        assert malformed.status_code == 400 and malformed.json()["code"] == "INVALID_JSON"
        assert client.post("/reset", json=[1]).status_code == 400
        bad_field = client.post("/reset", json={"task_index": -1})
        assert bad_field.status_code == 422 and "task_index" in bad_field.json()["detail"]
        out_of_range = client.post("/reset", json={"task_index": 9})
        assert out_of_range.status_code == 400 and "give 0..2" in out_of_range.json()["detail"]
        session_id = client.post("/reset").json()["metadata"]["session_id"]
        no_action = client.post("/step", json={"session_id": session_id})
        assert no_action.status_code == 422
        wrong_action = client.post("/step", json={"session_id": session_id, "action": {"m": 1}})
        assert wrong_action.status_code == 422 and "message" in wrong_action.json()["detail"]
        end = {"session_id": session_id, "action": {"message": "end"}}
        assert client.post("/step", json=end).json()["done"] is True
        after = client.post("/step", json=end)
        assert after.status_code == 409 and "step before reset" in after.json()["detail"]


def test_malformed_frames_are_answered_and_the_session_goes_on() -> None:
    with served() as client, client.websocket_connect("/ws") as ws:
        codes = []
        for frame in ("{nope", "[1, 2]", '{"type": "dance"}', '{"type": "step", "data": {}}'):
            ws.send_text(frame)
            codes.append(ws.receive_json()["data"]["code"])
        ws.send_bytes(b"\x00")
        codes.append(ws.receive_json()["data"]["code"])
        ws.send_json({"type": "step", "data": {"message": "x"}})
        before_reset = ws.receive_json()["data"]
        assert codes == [
            "INVALID_JSON",
            "VALIDATION_ERROR",
            "UNKNOWN_TYPE",
            "VALIDATION_ERROR",
            "INVALID_JSON",
        ]
        assert "step before reset" in before_reset["message"]
        ws.send_json({"type": "reset"})
        assert ws.receive_json()["type"] == "observation"


@pytest.mark.parametrize(
    ("action", "cause", "status"), [("raise", "env_error", 500), ("hang", "env_timeout", 504)]
)
def test_an_env_that_raises_or_hangs_fails_its_session_alone(
    action: str, cause: str, status: int
) -> None:
    with served(env_timeout_s=1.0) as client:
        with client.websocket_connect("/ws") as ws, client.websocket_connect("/ws") as other:
            for socket in (ws, other):
                socket.send_json({"type": "reset"})
                socket.receive_json()
            ws.send_json({"type": "step", "data": {"message": action}})
            error = ws.receive_json()
            assert error["type"] == "error" and error["data"]["cause"] == cause
            assert error["data"]["message"].startswith(cause)
            assert len(ProbeEnv.open) == 1  # the failed env is closed; the other goes on
            other.send_json({"type": "step", "data": {"message": "end"}})
            assert other.receive_json()["data"]["done"] is True
            ws.send_json({"type": "reset"})  # a new env for the failed session
            assert ws.receive_json()["type"] == "observation"
        session_id = client.post("/reset").json()["metadata"]["session_id"]
        failed = client.post(
            "/step", json={"session_id": session_id, "action": {"message": action}}
        )
        assert failed.status_code == status and failed.json()["cause"] == cause


def test_an_env_whose_close_raises_still_frees_its_session() -> None:
    with served(env_kwargs={"close_raises": True}) as client:
        with client.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset"})
            ws.receive_json()
            ws.send_json({"type": "close"})
            with pytest.raises(WebSocketDisconnect):
                ws.receive_json()
        wait_until(lambda: sessions(client) == 0)


def test_a_client_that_disconnects_mid_episode_frees_its_session() -> None:
    with served(max_sessions=1) as client:
        with client.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset"})
            ws.receive_json()
            assert sessions(client) == 1 and len(ProbeEnv.open) == 1
        wait_until(lambda: sessions(client) == 0 and not ProbeEnv.open)
        with client.websocket_connect("/ws") as ws:  # the slot is free again
            ws.send_json({"type": "reset"})
            assert ws.receive_json()["type"] == "observation"


def test_a_silent_client_is_timed_out() -> None:
    with served(session_timeout_s=0.2, max_sessions=1) as client:
        with client.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset"})
            ws.receive_json()
            error = ws.receive_json()["data"]
            assert "no message for 0.2 s" in error["message"]
            with pytest.raises(WebSocketDisconnect):
                ws.receive_json()
        wait_until(lambda: sessions(client) == 0)
        client.post("/reset")
        time.sleep(0.3)
        again = client.post("/reset")  # the idle HTTP session was reaped: room for this one
        assert again.status_code == 200 and sessions(client) == 1


def test_a_full_server_refuses_at_once() -> None:
    with served(max_sessions=1) as client, client.websocket_connect("/ws") as first:
        first.send_json({"type": "reset"})
        first.receive_json()
        with client.websocket_connect("/ws") as second:
            refused = second.receive_json()["data"]
            assert refused["code"] == "CAPACITY_REACHED" and "1 of 1" in refused["message"]
            with pytest.raises(WebSocketDisconnect) as closed:
                second.receive_json()
            assert closed.value.code == 1013
        full = client.post("/reset")
        assert full.status_code == 503 and full.json()["code"] == "CAPACITY_REACHED"


def test_a_token_is_checked_on_every_request() -> None:
    with served(token="s3cret") as client:
        assert client.get("/health").status_code == 401
        assert client.post("/reset", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        with pytest.raises(WebSocketDisconnect), client.websocket_connect("/ws") as ws:
            ws.receive_json()
        with client.websocket_connect("/ws?token=s3cret") as ws:
            ws.send_json({"type": "reset"})
            assert ws.receive_json()["type"] == "observation"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--env", "no_such_env"], "no environment 'no_such_env'"),
        (["--env", "math", "num_tasks=many"], "argument num_tasks='many' must be int"),
        (["--env", "math", "=3"], "must look like KEY=VALUE"),
        (["--env", "math", "--max-sessions", "0"], "--max-sessions 0: give at least 1"),
    ],
)
def test_the_command_refuses_a_bad_env_before_listening(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", *argv]) == 1
    assert said in capsys.readouterr().err


def test_the_banner_warns_when_every_interface_listens() -> None:
    def banner(host: str, token: bool = False) -> str:
        args = type("Args", (), {"host": host, "port": 8000, "env": "x", "max_sessions": 1})
        return _banner(args, token)  # type: ignore[arg-type]

    assert "WARNING" not in banner("127.0.0.1")
    warning = banner("0.0.0.0")
    assert "anyone who can reach this port can run the env" in warning and "--token" in warning
    assert "--token" not in banner("0.0.0.0", token=True).split("WARNING")[1]


def test_the_sweep_that_times_out_env_calls_runs_often_enough() -> None:
    """An env call past its timeout is found by the pool's sweep, not a timer per call: the
    sweep runs at least twice within the shorter timeout, and every 5 s at most."""
    assert ServeConfig(env_id=PROBE, env_timeout_s=1.0).sweep_period_s == 0.5
    assert ServeConfig(env_id=PROBE, session_timeout_s=0.2).sweep_period_s == 0.1
    assert ServeConfig(env_id=PROBE).sweep_period_s == 5.0
    assert ServeConfig(env_id=PROBE, env_timeout_s=None).sweep_period_s == 5.0
