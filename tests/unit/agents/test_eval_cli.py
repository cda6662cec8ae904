from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

import agenthub
from agenthub import AgentHubError
from agenthub.agents import (
    ChatTokenizer,
    EpisodeError,
    EvalConfig,
    EvalRun,
    EvalSummary,
    FakeEngine,
    Generation,
    SamplingParams,
    Timings,
    Trajectory,
)
from agenthub.agents._engines import _vocab_size, resolve_model
from agenthub.agents._run_dir import EvalIdentity, load_tasks, read_jsonl
from agenthub.agents._runner import _derive_seed
from agenthub.cli import _eval, main


def summarize(trajectories: list[Trajectory], k: int) -> dict[str, Any]:
    return EvalSummary.of(trajectories, k).model_dump()


def read_trajectories(path: Path, *, repair: bool = False) -> list[Trajectory]:
    return read_jsonl(path, Trajectory, repair=repair)


def prepare_out_dir(out: Path, identity: dict[str, Any]) -> list[Trajectory]:
    return EvalRun(EvalConfig(env="e"), out, []).prepare(EvalIdentity(**identity))


def traj(task_id: str, reward: float, *, cause: str | None = None) -> Trajectory:
    error = EpisodeError(cause=cause, message="boom") if cause else None  # type: ignore[arg-type]
    return Trajectory(
        env="e", task_id=task_id, tokens=[1, 2, 3], loss_mask=[0, 1, 1],
        logprobs=[0.0, -0.5, -0.25], policy_versions=[0, 0, 0], step_rewards=[reward],
        reward=reward, terminated=error is None, truncated=False, num_turns=1, error=error,
        timings=Timings(),
    )  # fmt: skip


def test_summary_has_mean_reward_pass_at_k_errors_and_tokens() -> None:
    runs = [traj("a", 1.0), traj("a", 0.0), traj("b", 0.0), traj("b", 0.0, cause="env_error")]
    summary = summarize(runs, k=2)
    assert summary["mean_reward"] == 0.25
    assert summary["pass_at_k"] == {"pass@1": 0.25, "pass@2": 0.5}
    assert summary["errors"] == {"env_error": 1}
    assert summary["tokens"] == {"total": 12, "generated": 8, "mean_generated_per_episode": 2.0}
    logged = [traj("a", 1.0).model_copy(update={"extra_logs": {"format": f}}) for f in (0, 1)]
    assert summarize([*logged, traj("b", 0.0)], k=1)["extra_logs"] == {"format": 0.5}


def test_an_episode_that_ended_in_an_error_counts_as_zero() -> None:
    # It earned 0.2 on its first step, then the env raised.
    runs = [traj("a", 1.0), traj("a", 0.2, cause="env_error")]
    summary = summarize(runs, k=2)
    assert (summary["mean_reward"], summary["mean_score"]) == (0.5, 0.5)
    assert summary["pass_at_k"] == {"pass@1": 0.5, "pass@2": 1.0}


def test_pass_at_k_only_for_binary_scores() -> None:
    assert summarize([traj("a", 0.5)], k=1)["pass_at_k"] is None


def test_a_line_cut_off_by_a_crash_is_dropped_and_repaired(tmp_path: Path) -> None:
    path = tmp_path / "trajectories.jsonl"
    whole = traj("a", 1.0).model_dump_json()
    path.write_text(whole + "\n" + whole[:30])
    assert [t.task_id for t in read_trajectories(path, repair=True)] == ["a"]
    assert path.read_text() == whole + "\n"


def test_resuming_into_a_different_run_is_refused(tmp_path: Path) -> None:
    identity = {"env": "e", "env_kwargs": {}, "tasks": None, "split": "held_out", "k": 1}
    assert prepare_out_dir(tmp_path, identity) == []
    (tmp_path / "trajectories.jsonl").write_text(traj("a", 1.0).model_dump_json() + "\n")
    with pytest.raises(AgentHubError, match="different env_kwargs"):
        prepare_out_dir(tmp_path, {**identity, "env_kwargs": {"x": 1}})


def test_a_run_that_finished_no_episode_is_taken_over_by_the_corrected_command(
    tmp_path: Path,
) -> None:
    # A start that failed on a mistyped --model left eval.json naming it, and the command
    # with the model corrected was refused as "a run with different model".
    identity = {"env": "e", "env_kwargs": {}, "tasks": None, "split": "held_out", "k": 1}
    assert prepare_out_dir(tmp_path, {**identity, "model": "/tmp/typo"}) == []
    failed = traj("a", 0.0, cause="env_error")
    (tmp_path / "trajectories.jsonl").write_text(failed.model_dump_json() + "\n")
    assert prepare_out_dir(tmp_path, {**identity, "model": "default"}) == []
    assert json.loads((tmp_path / "eval.json").read_text())["model"] == "default"
    assert (tmp_path / "failed.jsonl").read_text() == failed.model_dump_json() + "\n"


def test_a_base_url_without_its_scheme_is_named_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It failed at the server's first request, blaming a server "not running there".
    out = tmp_path / "out"
    command = ["eval", "--env", "math", "--base-url", "localhost:8000", "--out", str(out)]
    assert main(command) == 1
    assert "--base-url: 'localhost:8000' is not an HTTP URL; write it as http://" in (
        capsys.readouterr().err
    )
    assert not out.exists()


def test_model_must_be_a_model_directory(tmp_path: Path) -> None:
    with pytest.raises(AgentHubError, match="no config.json"):
        resolve_model(str(tmp_path), needed=True)
    assert resolve_model(None, needed=False) is None
    (tmp_path / "config.json").write_text('{"env": "math"}')
    with pytest.raises(AgentHubError, match="it has no model_type in its config.json"):
        resolve_model(str(tmp_path), needed=True)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(AgentHubError, match="it has no tokenizer"):
        resolve_model(str(tmp_path), needed=True)
    (tmp_path / "tokenizer.json").write_text("{}")
    assert resolve_model(str(tmp_path), needed=True) == tmp_path
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "model").mkdir()
    with pytest.raises(
        AgentHubError, match=f"training run; its policy .* is --model {tmp_path}/model$"
    ):
        resolve_model(str(tmp_path), needed=True)


def test_eval_s_stdout_is_its_json_summary_alone(
    tmp_path: Path, tracked: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # The progress bar and a "wrote ..." line shared stdout with the summary: `| jq` failed.
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "Go.", "label": 1}\n')
    command = ["eval", "--env", "eval-test-tracked", "--tasks", str(tasks)]
    assert main([*command, "--out", str(tmp_path / "out")]) == 0
    said = capsys.readouterr()
    assert json.loads(said.out)["episodes"] == 1, said.out
    assert "wrote " in said.err


def test_a_resumed_eval_says_what_it_kept_and_its_bar_averages_what_the_summary_does(
    tmp_path: Path, tracked: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # The bar counted the kept episodes but averaged only the new ones' rewards (0.145 on the
    # bar, 0.225 in the summary), and nothing said the run went on from an earlier one.
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(f'{{"id": "{i}", "prompt": "Go.", "label": 1}}\n' for i in "ab"))
    command = ["eval", "--env", "eval-test-tracked", "--tasks", str(tasks)]
    assert main([*command, "--out", str(tmp_path / "out"), "-n", "1"]) == 0
    capsys.readouterr()
    assert main([*command, "--out", str(tmp_path / "out")]) == 0
    assert f"resuming: 1 of 2 episodes are kept from an earlier run in {tmp_path / 'out'}" in (
        capsys.readouterr().err
    )
    stats = _eval._Stats([traj("a", 1.0), traj("b", 0.5, cause="env_error")])
    assert stats.add(traj("c", 0.0)).endswith("reward 0.333")


def test_eval_help_lists_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = capsys.readouterr().out
    options = "--env --model --base-url --tasks --split -n -k --concurrency --max-turns"
    for option in f"{options} --max-tokens --temperature --out".split():
        assert option in out


def test_eval_without_a_model_directory_fails_clearly(
    tmp_path: Path, fixtures: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["eval", "--env", "reward_func", f"reward_func={fixtures / 'reward_plain.py'}",
         "--tasks", str(fixtures / "tasks.jsonl"), "--model", str(tmp_path / "nothing"),
         "--out", str(tmp_path / "out")]
    )  # fmt: skip
    assert code == 1 and "no config.json" in capsys.readouterr().err


def test_reward_and_agent_files_can_be_given_as_flags(
    tmp_path: Path, fixtures: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agenthub.cli._eval import _env_kwargs
    from agenthub.cli._main import build_parser

    args = build_parser().parse_args(
        ["eval", "--env", "reward_func", "--reward-func", "r.py", "--agent-func", "a.py", "x=1"]
    )
    assert _env_kwargs(args) == {"x": 1, "reward_func": "r.py", "agent_func": "a.py"}
    code = main(
        ["eval", "--env", "reward_func", "--reward-func", "r.py", "reward_func=other.py",
         "--out", str(tmp_path / "out")]
    )  # fmt: skip
    assert code == 1 and "--reward-func and reward_func= disagree" in capsys.readouterr().err


def _record_generations(
    chat: ChatTokenizer, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[list[int], SamplingParams]]:
    """Make eval's engine a FakeEngine that replies "3" and records each request."""
    calls: list[tuple[list[int], SamplingParams]] = []

    class Recorder(FakeEngine):
        async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
            calls.append((list(prompt_ids), sampling))
            return await super().generate(prompt_ids, sampling)

    async def fake_engine(args: Any) -> tuple[ChatTokenizer, FakeEngine]:
        ids = [*chat.encode_text("3"), chat.closing_ids[0]]
        return chat, Recorder(lambda prompt: ids, stop_token_ids=chat.stop_token_ids)

    monkeypatch.setattr(_eval, "_build_engine", fake_engine)
    return calls


@pytest.fixture
def tracked(chat: ChatTokenizer, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """eval on `eval-test-tracked` (a TrackedEnv) with a recording fake engine."""
    agenthub.register("eval-test-tracked", "tests.unit.agents._envs:TrackedEnv", override=True)
    return _record_generations(chat, monkeypatch)


def test_the_last_error_is_quoted_without_a_doubled_period(
    tmp_path: Path, tracked: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out"
    row = {"id": "a", "prompt": "Go.", "label": 1, "score_error": "raise the timeout."}
    tasks.write_text(json.dumps(row) + "\n")
    command = ["eval", "--env", "eval-test-tracked", "--tasks", str(tasks), "--out", str(out)]
    assert main(command) == 1
    said = capsys.readouterr().err
    assert "score_error: RewardFuncError: raise the timeout. Each is in" in said


def test_a_rerun_plays_the_episodes_that_failed_and_only_the_missing_samples(
    tmp_path: Path, tracked: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    calls = tracked
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out"

    def evaluate(broken: bool) -> str:
        calls.clear()
        meta = {"fail_at": 1} if broken else {}
        rows = [{"id": "a", "prompt": "Go.", "label": 1, **meta}, {"id": "b", "prompt": "Go."}]
        rows[1]["label"] = 1
        tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
        command = ["eval", "--env", "eval-test-tracked", "--tasks", str(tasks), "-k", "3"]
        assert main([*command, "--out", str(out)]) == 0
        return capsys.readouterr().err

    said = evaluate(broken=True)
    assert "3 of 6 episodes ended in errors (env_error x3) and count as reward 0" in said
    assert "the last, task 'a': env_error: step: ValueError: broken at turn 1" in said
    # As if the run had been cut off before sample 1 of task b was written.
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    lost = [line for line in lines if '"task_id":"b","sample":1,' in line]
    (out / "trajectories.jsonl").write_text("".join(f"{x}\n" for x in lines if x not in lost))

    said = evaluate(broken=False)
    assert "re-running 3 episodes that ended in errors" in said and "reward 0" not in said
    assert len((out / "failed.jsonl").read_text().splitlines()) == 3
    again = read_trajectories(out / "trajectories.jsonl")
    assert sorted((t.task_id, t.sample) for t in again) == [
        ("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)
    ]  # fmt: skip
    assert all(t.error is None for t in again) and len(lost) == 1
    # The lost sample is played as itself, with its own seed, not as a repeat of sample 0.
    # Each generation's sampling seed is derived from its sample.
    assert sorted(str(sampling.seed) for _, sampling in calls) == sorted(
        str(_derive_seed(0, task, sample, 0))
        for task, sample in (("a", 0), ("a", 1), ("a", 2), ("b", 1))
    )
    assert json.loads((out / "summary.json").read_text())["errors"] == {}


def test_no_chat_template_tokenizes_text_prompts_as_they_are(
    tmp_path: Path,
    chat: ChatTokenizer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = _record_generations(chat, monkeypatch)
    reward, tasks = tmp_path / "reward.py", tmp_path / "tasks.jsonl"
    reward.write_text("def reward_func(queries, prompts, labels):\n    return [1.0]\n")
    templated = "<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n"
    tasks.write_text(json.dumps({"id": "a", "prompt": templated}) + "\n")
    command = ["eval", "--env", "reward_func", f"reward_func={reward}", "--tasks", str(tasks)]

    assert main([*command, "--out", str(tmp_path / "raw"), "--no-chat-template"]) == 0
    assert [prompt for prompt, _ in calls] == [chat.encode_text(templated)]
    # A run is resumed only with the same setting.
    assert main([*command, "--out", str(tmp_path / "raw")]) == 1
    assert "holds an eval run with different chat_template" in capsys.readouterr().err
    calls.clear()
    assert main([*command, "--out", str(tmp_path / "templated")]) == 0
    expected = chat.encode_prompt([agenthub.Message(role="user", content=templated)])
    assert [prompt for prompt, _ in calls] == [expected]


def test_the_env_step_timeout_is_the_flag_s(
    tmp_path: Path, tracked: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    agenthub.register("eval-test-slow", "tests.unit._envs:CountdownEnv", override=True)
    command = ["eval", "--env", "eval-test-slow", "delay_s=0.5", "-n", "1", "--out"]
    assert main([*command, str(tmp_path / "cut"), "--env-step-timeout", "0.1"]) == 1
    assert "env_timeout: reset took longer than 0.1 s" in capsys.readouterr().err
    assert main([*command, str(tmp_path / "waited"), "--env-step-timeout", "5"]) == 0


def test_the_generate_timeout_is_the_flag_s(
    tmp_path: Path,
    chat: ChatTokenizer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    agenthub.register("eval-test-tracked", "tests.unit.agents._envs:TrackedEnv", override=True)

    async def slow_engine(args: Any) -> tuple[ChatTokenizer, FakeEngine]:
        ids = [*chat.encode_text("3"), chat.closing_ids[0]]
        return chat, FakeEngine(lambda prompt: ids, latency_s=0.5)

    monkeypatch.setattr(_eval, "_build_engine", slow_engine)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "Go.", "label": 1}\n')
    command = ["eval", "--env", "eval-test-tracked", "--tasks", str(tasks), "--out"]
    assert main([*command, str(tmp_path / "cut"), "--generate-timeout", "0.1"]) == 1
    assert "generation_timeout: generate took longer than 0.1 s" in capsys.readouterr().err
    assert main([*command, str(tmp_path / "waited"), "--generate-timeout", "5"]) == 0


def test_eval_exits_non_zero_when_every_episode_failed(
    tmp_path: Path, tracked: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "Go.", "label": 1, "fail_at": 1}\n')
    command = ["eval", "--env", "eval-test-tracked", "--tasks", str(tasks), "-k", "2"]
    assert main([*command, "--out", str(tmp_path / "out")]) == 1
    assert "2 of 2 episodes ended in errors (env_error x2)" in capsys.readouterr().err


def test_eval_takes_an_env_class_from_a_module_in_the_working_directory(
    tmp_path: Path,
    chat: ChatTokenizer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _record_generations(chat, monkeypatch)
    (tmp_path / "my_envs.py").write_text(
        "from tests.unit.agents._envs import TrackedEnv\n\nclass Mine(TrackedEnv):\n    pass\n"
    )
    (tmp_path / "tasks.jsonl").write_text('{"id": "a", "prompt": "Go.", "label": 1}\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert main(["eval", "--env", "my_envs:Mine", "--tasks", "tasks.jsonl"]) == 0, (
        capsys.readouterr()
    )
    summary = json.loads((tmp_path / "runs" / "eval-my_envs.Mine" / "summary.json").read_text())
    assert summary["episodes"] == 1 and summary["errors"] == {}
    assert sys.path[-1] == str(tmp_path)


def test_a_rerun_with_another_model_or_sampling_is_refused_and_n_narrows_the_summary(
    tmp_path: Path, tracked: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out"
    tasks.write_text("".join(f'{{"id": "{i}", "prompt": "Go.", "label": 1}}\n' for i in "ab"))
    command = ["eval", "--env", "eval-test-tracked", "--tasks", str(tasks), "--out", str(out)]
    assert main(command) == 0
    capsys.readouterr()
    for changed, key in (
        (["--temperature", "0.5"], "temperature"),
        (["--model", str(tmp_path)], "model"),
        (["--max-reply-tokens", "8"], "max_reply_tokens"),
        (["--stop", "</a>"], "stop"),
    ):
        assert main([*command, *changed]) == 1
        assert f"holds an eval run with different {key};" in capsys.readouterr().err
    assert main([*command, "-n", "1"]) == 0
    assert json.loads((out / "summary.json").read_text())["episodes"] == 1
    # Nothing left to play is said, not passed off as a new run's result.
    assert "all 1 episodes are already in" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--max-reply-tokens", "0"], "--max-reply-tokens 0: each must be at least 1"),
        (["-k", "0", "--max-turns", "0"], "-k 0, --max-turns 0: each must be at least 1"),
        (["--temperature", "-1"], "--temperature -1.0: must be 0 (greedy) or more"),
        (["--stop", "</a>", "--stop", ""], "--stop '': a stop string cannot be empty"),
        (["--env-step-timeout", "0"], "--env-step-timeout 0: must be above 0"),
        (["--generate-timeout", "-1"], "--generate-timeout -1: must be above 0"),
    ],
)
def test_bad_numbers_are_refused_naming_the_flag(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "--env", "math", *flags]) == 1
    assert said in capsys.readouterr().err


def test_one_malformed_server_reply_fails_only_its_episode(
    tmp_path: Path,
    chat: ChatTokenizer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import httpx

    from agenthub.agents import OpenAIEngine

    agenthub.register("eval-test-tracked", "tests.unit.agents._envs:TrackedEnv", override=True)
    ids = [*chat.encode_text("3"), chat.closing_ids[0]]
    tokens = [f"token_id:{i}" for i in ids]
    good = {"finish_reason": "stop", "token_ids": ids, "logprobs": {"tokens": tokens}}
    good["logprobs"]["token_logprobs"] = [-0.5] * len(ids)
    asked = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal asked
        asked += 1
        if asked == 3:
            return httpx.Response(200, text="<html>proxy error</html>")
        return httpx.Response(200, json={"choices": [good]})

    async def fake_engine(args: Any) -> tuple[ChatTokenizer, OpenAIEngine]:
        transport = httpx.MockTransport(handle)
        return chat, OpenAIEngine("http://server/v1", "m", 4096, transport=transport)

    monkeypatch.setattr(_eval, "_build_engine", fake_engine)
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out"
    tasks.write_text("".join(f'{{"id": "{i}", "prompt": "Go.", "label": 1}}\n' for i in "abcde"))
    command = ["eval", "--env", "eval-test-tracked", "--tasks", str(tasks), "--out", str(out)]
    assert main([*command, "--concurrency", "1"]) == 0
    said = capsys.readouterr().err
    assert "1 of 5 episodes ended in errors (generation_error x1)" in said
    assert "http://server/v1/completions answered 200 but not with a JSON object" in said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 5 and summary["mean_reward"] == 0.8


def test_an_out_dir_that_cannot_be_written_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    assert main(["eval", "--env", "math", "-n", "1", "--out", str(tmp_path / "file" / "o")]) == 1
    said = capsys.readouterr().err
    assert said == (
        f"agenthub: error: cannot write to --out {tmp_path / 'file' / 'o'}: Not a directory; "
        "choose another --out, a directory you can write to\n"
    )


@pytest.mark.parametrize(
    ("stop", "ctrl_c"),
    [
        (signal.SIGINT, signal.default_int_handler),
        (signal.SIGTERM, signal.default_int_handler),
        (signal.SIGTERM, signal.SIG_IGN),  # a background job's, which ignores Ctrl-C
    ],
    ids=["ctrl-c", "sigterm", "sigterm-in-background"],
)
def test_an_interrupted_eval_keeps_its_finished_episodes_for_the_same_command_to_continue(
    stop: signal.Signals,
    ctrl_c: Any,
    tmp_path: Path,
    chat: ChatTokenizer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    agenthub.register("eval-test-tracked", "tests.unit.agents._envs:TrackedEnv", override=True)
    calls = _record_generations(chat, monkeypatch)
    stop_at: list[int] = [3]
    build = _eval._build_engine

    async def stopping_engine(args: Any) -> tuple[ChatTokenizer, FakeEngine]:
        chat, engine = await build(args)
        ask = engine.generate

        async def generate(prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
            if len(calls) + 1 in stop_at:
                os.kill(os.getpid(), stop)
                await anyio.sleep(10)
            return await ask(prompt_ids, sampling)

        engine.generate = generate  # type: ignore[method-assign]
        return chat, engine

    monkeypatch.setattr(_eval, "_build_engine", stopping_engine)
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out"
    tasks.write_text("".join(f'{{"id": "{i}", "prompt": "Go.", "label": 1}}\n' for i in "abcd"))
    command = ["eval", "--env", "eval-test-tracked", "--tasks", str(tasks), "--out", str(out)]
    before = signal.getsignal(signal.SIGTERM)
    previous_ctrl_c = signal.signal(signal.SIGINT, ctrl_c)
    try:
        assert main([*command, "--concurrency", "1"]) == 130
    finally:
        signal.signal(signal.SIGINT, previous_ctrl_c)
    assert signal.getsignal(signal.SIGTERM) is before
    said = capsys.readouterr().err
    assert f"interrupted; 2 of 4 episodes are done and kept in {out / 'trajectories.jsonl'}" in said
    assert "Running the same command again plays the other 2." in said
    assert not (out / "summary.json").exists()

    stop_at.clear()
    calls.clear()
    assert main([*command, "--concurrency", "1"]) == 0
    assert len(calls) == 2
    assert json.loads((out / "summary.json").read_text())["episodes"] == 4


def test_token_ids_are_bounded_by_the_model_s_padded_vocabulary(tmp_path: Path) -> None:
    # A served model may sample an id past its tokenizer's last (padded embedding rows): not
    # the server's error. Without the model's config.json, the tokenizer's size is the bound.
    assert _vocab_size(tmp_path, 151_665) == 151_665
    (tmp_path / "config.json").write_text('{"vocab_size": 151936}')
    assert _vocab_size(tmp_path, 151_665) == 151_936
    (tmp_path / "config.json").write_text('{"vocab_size": 100}')
    assert _vocab_size(tmp_path, 151_665) == 151_665


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (
            "TrainOnlyEnv",
            "the env's tasks('held_out') raised KeyError: 'held_out' (raised at ",
        ),
        ("NoTasksEnv", "Give tasks with --tasks FILE, or evaluate another split (--split train)"),
    ],
)
def test_an_env_whose_tasks_fail_is_named_in_a_line(env: str, said: str) -> None:
    with pytest.raises(AgentHubError) as caught:
        load_tasks(f"tests.unit._repl_envs:{env}", {}, tasks_file=None, split="held_out", limit=2)
    assert said in str(caught.value)
    if env == "TrainOnlyEnv":
        assert "_repl_envs.py:" in str(caught.value) and "in tasks)" in str(caught.value)
