"""`agenthub view`'s server side without a browser: run directories in, JSON out."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from starlette.testclient import TestClient

from agenthub.agents import (
    ChatTokenizer,
    EpisodeError,
    FakeEngine,
    InferenceEngine,
    SamplingParams,
    Timings,
    Trajectory,
)
from agenthub.agents._eval_summary import EvalSummary
from agenthub.repl import Repl
from agenthub.view import JsonLines, create_app, episode_row, exposure_warning, token_kinds
from tests.tiny_model import build_tokenizer

GUESS = "tests.unit._repl_envs:GuessEnv"


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    out: Path = tmp_path_factory.mktemp("tiny-tokenizer")
    build_tokenizer(out)
    return ChatTokenizer.from_pretrained(out)


def trajectory(task: str, reward: float, *, error: str | None = None, n: int = 6) -> Trajectory:
    mask = [0, 0] + [1] * (n - 2)
    return Trajectory(
        env="guess",
        task_id=task,
        tokens=list(range(10, 10 + n)),
        loss_mask=mask,
        logprobs=[-0.5 * m for m in mask],
        policy_versions=[3] * n,
        step_rewards=[reward],
        reward=reward,
        terminated=error is None,
        truncated=False,
        num_turns=1,
        error=None if error is None else EpisodeError(cause=error, message="it broke"),  # type: ignore[arg-type]
        timings=Timings(total_s=0.5),
    )


def eval_run(directory: Path, trajectories: list[Trajectory], *, extra: str = "") -> Path:
    directory.mkdir(parents=True)
    identity = {"env": "guess", "model": "default", "k": 1}
    (directory / "eval.json").write_text(json.dumps(identity))
    lines = "".join(t.model_dump_json() + "\n" for t in trajectories)
    (directory / "trajectories.jsonl").write_text(lines + extra)
    (directory / "summary.json").write_text(EvalSummary.of(trajectories, 1).model_dump_json())
    return directory


def served(paths: list[Path]) -> TestClient:
    return TestClient(create_app(paths), base_url="http://127.0.0.1")


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("AGENTHUB_CACHE_DIR", str(tmp_path / "cache"))  # no default model here
    first = [trajectory(f"t{i}", float(i % 2)) for i in range(7)]
    first.append(trajectory("t7", 0.0, error="env_error"))
    second = [trajectory(f"t{i}", 1.0, n=9) for i in range(3)]
    runs = [eval_run(tmp_path / "a", first), eval_run(tmp_path / "b", second)]
    return served(runs)


def test_the_runs_page_shows_each_run_with_its_summary(client: TestClient) -> None:
    runs = client.get("/api/runs").json()
    assert [r["name"] for r in runs] == ["a", "b"]
    first = runs[0]
    assert first["kind"] == "eval" and first["env"] == "guess" and first["model"] == "default"
    assert first["summary"]["episodes"] == first["episodes"]["count"] == 8
    assert first["episodes"]["errors"] == {"env_error": 1}
    assert first["notices"] == []


def test_the_episode_table_pages_sorts_and_filters(client: TestClient) -> None:
    assert client.get("/api/runs/0").json()["indexing"] is False  # read whole by now
    page = client.get("/api/runs/0/episodes?limit=3").json()
    assert [r["task_id"] for r in page["rows"]] == ["t0", "t1", "t2"]
    assert page["matching"] == page["indexed"] == 8 and page["complete"]
    best = client.get("/api/runs/0/episodes?sort=reward&desc=1&limit=50").json()["rows"]
    assert [r["reward"] for r in best] == sorted((r["reward"] for r in best), reverse=True)
    failed = client.get("/api/runs/0/episodes?error=any").json()
    assert [r["task_id"] for r in failed["rows"]] == ["t7"] and failed["errors"] == ["env_error"]
    assert client.get("/api/runs/0/episodes?error=none").json()["matching"] == 7
    assert client.get("/api/runs/0/episodes?min_reward=1").json()["matching"] == 3
    assert client.get("/api/runs/0/episodes?task=T3").json()["rows"][0]["task_id"] == "t3"
    bad = client.get("/api/runs/0/episodes?sort=password")
    assert bad.status_code == 400 and "sort by one of" in bad.json()["error"]


def test_an_episode_comes_token_by_token_with_kinds_logprobs_and_turns(client: TestClient) -> None:
    episode = client.get("/api/runs/1/episodes/2").json()
    assert episode["task_id"] == "t2" and episode["line"] == 3
    assert episode["kinds"] == ["prompt", "prompt"] + ["model"] * 7
    assert episode["logprobs"][2] == -0.5 and episode["pieces"][0] == "#10"
    assert episode["turns"] == [{"reply": [2, 9], "kind": "model", "answer": None, "reward": 1.0}]
    assert any("no tokenizer found" in n for n in episode["notices"])
    assert client.get("/api/runs/1/episodes/3").status_code == 404


def test_no_request_reaches_a_file_outside_the_runs(client: TestClient, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("the secret")
    for path in (
        "/static/../../../pyproject.toml",
        "/static/%2e%2e/%2e%2e/_runs.py",
        "/static/..%2f..%2f_app.py",
        "/vendor/../static/app.js/../../../_app.py",
        "/api/runs/2",
        "/api/runs/-1/episodes",
        "/api/runs/0/../../secret.txt",
        "/api/runs/0/episodes/../../../secret.txt",
        f"/static/{tmp_path}/secret.txt",
        "/a/trajectories.jsonl",
        "/secret.txt",
    ):
        response = client.get(path)
        assert response.status_code == 404, path
        assert "the secret" not in response.text and "import" not in response.text, path
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/vendor/plotly.min.js").text.startswith("/**")


def test_another_host_name_is_refused(client: TestClient) -> None:
    """A web page elsewhere cannot read the runs by pointing its own name at 127.0.0.1."""
    assert client.get("/api/runs", headers={"host": "attacker.example"}).status_code == 400


def test_bad_lines_become_notices_and_the_rest_is_shown(tmp_path: Path) -> None:
    good = [trajectory(f"t{i}", 1.0) for i in range(3)]
    old = good[0].model_dump(exclude={"sample", "score", "policy_versions"})
    extra = "{not json\n" + json.dumps(old) + "\n" + '{"tokens": [1, 2'
    run = eval_run(tmp_path / "r", good, extra=extra)
    client = served([run])
    page = client.get("/api/runs/0/episodes").json()
    assert page["indexed"] == 4  # the three good ones and the older one
    messages = [(n["line"], n["message"]) for n in page["notices"]]
    assert messages[0][0] == 4 and messages[0][1].startswith("not JSON")
    assert messages[1][0] == 6 and "incomplete" in messages[1][1]
    older = client.get("/api/runs/0/episodes/3").json()
    assert older["task_id"] == "t0" and older["policy_versions"] is None
    assert any("policy_versions: Field required" in n for n in older["notices"])


def test_a_growing_file_shows_new_lines_and_a_rewritten_one_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "trajectories.jsonl"
    lines = [trajectory(f"t{i}", 0.0).model_dump_json() + "\n" for i in range(3)]
    path.write_text(lines[0] + lines[1][:20])
    index = JsonLines(path, episode_row)
    index.refresh()
    index.wait_for(10)
    assert len(index) == 1 and "incomplete" in index.notices()[0].message
    with path.open("a") as file:
        file.write(lines[1][20:] + lines[2])
    index.refresh()
    index.wait_for(10)
    assert [r.task_id for r in index.rows()] == ["t0", "t1", "t2"] and index.notices() == []
    assert index.read(2)["task_id"] == "t2" and index.line_number(2) == 3
    path.write_text(lines[2])
    index.refresh()
    index.wait_for(10)
    assert [(r.index, r.task_id) for r in index.rows()] == [(0, "t2")]


def test_a_training_run_gives_curves_by_step(tmp_path: Path) -> None:
    run = tmp_path / "train"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"env": "math", "model": "default"}))
    records = [{"step": s, "train/reward": s / 10, "flag": True} for s in range(1, 6)]
    text = "".join(json.dumps(r) + "\n" for r in records)
    (run / "metrics.jsonl").write_text(text)
    overview = served([run]).get("/api/runs/0").json()
    assert overview["kind"] == "train" and overview["train"]["steps_logged"] == 5
    series = served([run]).get("/api/runs/0/curves").json()["series"]
    assert series["train/reward"] == {
        "x": [1.0, 2.0, 3.0, 4.0, 5.0],
        "y": [0.1, 0.2, 0.3, 0.4, 0.5],
        "xlabel": "learner step",
    }
    assert "flag" not in series


def test_a_directory_of_an_older_or_foreign_format_says_so(tmp_path: Path) -> None:
    run = tmp_path / "old"
    run.mkdir()
    (run / "trajectories.jsonl").write_text(trajectory("t0", 1.0).model_dump_json() + "\n")
    overview = served([run]).get("/api/runs/0").json()
    assert overview["kind"] == "unknown" and overview["episodes"]["count"] == 1
    assert "older agenthub" in overview["notices"][0]["message"]


def test_only_loopback_hosts_listen_without_a_warning() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert exposure_warning(host, 8000) is None
    warning = exposure_warning("0.0.0.0", 8000)
    assert warning is not None and "anyone who can reach this machine" in warning


@pytest.mark.anyio
async def test_token_kinds_of_a_saved_episode_are_the_repl_s(
    chat: ChatTokenizer, tmp_path: Path
) -> None:
    """A REPL episode with a typed reply, a sampled one, then a typed one: the view tells the
    kinds apart from the saved trajectory alone, as the REPL knew them while playing."""
    reply = [*chat.encode_text("4"), chat.stop_token_ids[0]]

    async def build() -> InferenceEngine:
        return FakeEngine(lambda prompt: reply)

    repl = Repl(
        env=GUESS,
        env_kwargs={},
        tasks_file=None,
        task_index=0,
        seed=0,
        chat=chat,
        sampling=SamplingParams(max_tokens=16),
        console=Console(file=io.StringIO(), color_system=None),
        engine_factory=build,
    )
    await repl.start()
    for line in ("3", "", ":gen", "7", ""):
        assert await repl.feed(line)
    assert repl.episode is not None
    saved = repl.episode.trajectory()
    expected = repl.episode.kinds
    await repl.aclose()
    assert {"prompt", "env", "model", "human"} <= set(expected)
    assert token_kinds(saved.tokens, saved.loss_mask, chat) == expected
    without = token_kinds(saved.tokens, saved.loss_mask, None)
    assert [k == "model" for k in without] == [m == 1 for m in saved.loss_mask]


def test_view_without_its_extra_names_the_extra(tmp_path: Path) -> None:
    # None in sys.modules is how Python marks a module as not importable.
    probe = (
        "import sys; sys.modules['plotly'] = None\n"
        "from agenthub.cli import main\n"
        f"sys.exit(main(['view', {str(tmp_path)!r}, '--no-browser']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "agenthub: error: agenthub view needs the plotly package for its charts: "
        "pip install 'agenthub[view]'"
    )


def test_view_of_a_missing_directory_says_what_to_give(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agenthub.cli import main

    assert main(["view", str(tmp_path / "nope"), "--no-browser"]) == 1
    assert "nope: no such run directory or file" in capsys.readouterr().err


def test_a_run_still_writing_is_going_and_a_summarized_eval_is_not(tmp_path: Path) -> None:
    run = eval_run(tmp_path / "r", [trajectory("t0", 1.0)])
    summary = run / "summary.json"
    summary.unlink()
    client = served([run])
    assert client.get("/api/runs/0").json()["live"]["going"] is True
    summary.write_text(EvalSummary.of([trajectory("t0", 1.0)], 1).model_dump_json())
    assert client.get("/api/runs/0").json()["live"]["going"] is False


def test_view_says_when_host_exposes_it_beyond_this_machine(tmp_path: Path) -> None:
    run = eval_run(tmp_path / "r", [trajectory("t0", 1.0)])
    command = [sys.executable, "-m", "agenthub", "view", str(run), "--no-browser"]
    with subprocess.Popen(
        [*command, "--host", "0.0.0.0"], stdout=subprocess.PIPE, text=True
    ) as server:
        assert server.stdout is not None
        try:
            warning, address = server.stdout.readline(), server.stdout.readline()
        finally:
            server.terminate()
    assert warning.startswith("agenthub view: listening on 0.0.0.0:")
    assert "anyone who can reach this machine" in warning
    assert address.startswith("agenthub view: 1 run(s) at http://127.0.0.1:")


def test_the_view_imports_no_heavy_library() -> None:
    """A light install (no torch or transformers) serves the view; tokens then show as ids."""
    heavy = ("torch", "vllm", "ray", "deepspeed", "transformers", "plotly")
    code = (
        "import sys, agenthub.view\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_a_file_saved_by_the_repl_is_a_run_of_its_own(tmp_path: Path) -> None:
    saved = tmp_path / "saved.jsonl"
    saved.write_text("".join(trajectory(f"t{i}", 1.0).model_dump_json() + "\n" for i in (0, 1)))
    client = served([saved])
    overview = client.get("/api/runs/0").json()
    assert (overview["kind"], overview["name"], overview["env"]) == (
        "saved",
        "saved.jsonl",
        "guess",
    )
    assert overview["episodes"]["count"] == 2 and overview["notices"] == []
    assert client.get("/api/runs/0/episodes/1").json()["task_id"] == "t1"
