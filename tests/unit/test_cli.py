import ast
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from agenthub import AgentHubError, make, register
from agenthub._registry import _refresh, _registered
from agenthub.cli import main
from agenthub.cli._main import error_message
from agenthub.cli._scaffold import scaffold
from agenthub.envs._foreign import MissingExtraError

from ._envs import CountdownEnv
from ._plugins import declare

REPO = Path(__file__).resolve().parents[2]


def agenthub(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agenthub", *args], capture_output=True, text=True, timeout=60
    )


def test_help_lists_every_command() -> None:
    result = agenthub("--help")
    assert result.returncode == 0
    for command in ("envs", "eval", "repl", "train", "model", "sandbox", "serve-rm", "bench"):
        assert command in result.stdout


def test_every_command_names_a_handler_that_exists() -> None:
    # Commands were registered three ways (a wrapper from _main, which _sandbox imported back,
    # and a function itself); each now names its handler as "module:function".
    import argparse

    from agenthub.cli._main import _handler, build_parser

    def leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [parser]
        return [leaf for sub in subs for child in sub.choices.values() for leaf in leaves(child)]

    handlers = [leaf.get_default("handler") for leaf in leaves(build_parser())]
    assert all(isinstance(h, str) for h in handlers), handlers
    assert all(callable(_handler(name)) for name in handlers)


def test_envs_list_shows_builtins_with_package_and_description(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["envs", "list", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_id = {r["id"]: r for r in rows}
    assert by_id["reward_func"]["package"] == "agenthub"
    assert by_id["reward_func"]["description"].startswith("Single-turn")
    assert main(["env", "list"]) == 0
    assert "reward_func" in capsys.readouterr().out


def test_envs_list_shows_an_id_two_packages_declare_once_with_why_it_cannot_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(tmp_path)
    declare(tmp_path, "my-math", {"math": "my_math.env:MathEnv"})
    try:
        assert main(["envs", "list", "--json"]) == 1
    finally:
        _refresh()
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["id"] for r in rows].count("math") == 1
    by_id = {r["id"]: r for r in rows}
    assert "declared by several installed packages" in by_id["math"]["error"]
    assert by_id["reward_func"]["description"].startswith("Single-turn")


def test_envs_show_describes_an_env_and_the_arguments_it_takes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["envs", "show", "math"]) == 0
    out = capsys.readouterr().out
    assert "agenthub.envs.math:MathEnv" in out
    assert "With `max_attempts > 1`, a wrong answer" in out  # the whole docstring
    assert re.search(r"max_attempts\s+│\s+int\s+│\s+1\b", out)

    assert main(["envs", "show", "openrlhf_agent", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    by_name = {a["name"]: a for a in shown["arguments"]}
    assert by_name["agent_func"]["required"] is True
    assert by_name["input_key"] == {
        "name": "input_key",
        "type": "str",
        "default": "prompt",
        "required": False,
        "description": "",
    }
    assert shown["takes_any_argument"] is False
    assert shown["tools"] == []


def test_envs_show_gives_registered_defaults_argument_docs_and_tools(
    capsys: pytest.CaptureFixture[str],
) -> None:
    register("slow_countdown", "tests.unit._envs:CountdownEnv", override=True, delay_s=0.5)
    try:
        assert main(["envs", "show", "slow_countdown", "--json"]) == 0
    finally:
        _registered.pop("slow_countdown")
    (delay,) = json.loads(capsys.readouterr().out)["arguments"]
    assert delay["default"] == 0.5
    assert delay["description"] == "seconds each reset and step wait first"

    assert main(["envs", "show", "tests.unit._tool_envs:Calculator"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"max_turns\s+│\s+int \| None\s+│\s+3\b", out)  # the class's own
    assert re.search(r"add\s+Add two integers\.", out)
    assert "divide    Divide a by b." in out

    assert main(["envs", "show", "tests.unit._repl_envs:StopAtEqualsEnv", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stop"] == ["="]
    assert main(["envs", "show", "tests.unit._repl_envs:StopAtEqualsEnv"]) == 0
    assert 'A reply ends where it writes: ["="]' in capsys.readouterr().out

    assert main(["envs", "show", "tests.unit._repl_envs:RuledGuessEnv", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["system_prompt"] == "Guess with one number."
    assert main(["envs", "show", "tests.unit._repl_envs:RuledGuessEnv"]) == 0
    assert "that has none of its own):\nGuess with one number." in capsys.readouterr().out


def test_envs_show_lists_what_an_env_passes_on_to_its_base_class(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `def __init__(self, train, **settings): super().__init__(**settings)` showed `train` and
    # "takes arguments not listed here", not the base class's own.
    assert main(["envs", "show", "tests.unit._repl_envs:LevelledFromFilesEnv", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [a["name"] for a in shown["arguments"]] == ["train", "top", "max_turns"]
    assert shown["arguments"][1]["description"] == "the largest number it draws"
    assert shown["arguments"][0]["required"] and shown["arguments"][2]["default"] == 5
    assert shown["takes_any_argument"] is False


class HubEnv(CountdownEnv):
    """Plays the games of [a-hub]; agenthub[a-hub] installs it."""

    @staticmethod
    def known_ids() -> dict[str, bool]:
        return {"Maze-v0": True, "Words-v0": False, "Chess-v0": True}


class MissingHubEnv(CountdownEnv):
    """Plays the games of a hub that is not installed."""

    @staticmethod
    def known_ids() -> dict[str, bool]:
        raise MissingExtraError("the hub env needs the hub package: pip install 'agenthub[hub]'")


def test_envs_show_lists_the_ids_an_adapter_runs_offline_and_those_needing_network(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["envs", "show", "tests.unit.test_cli:HubEnv", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["known_ids"] == {"Maze-v0": True, "Words-v0": False, "Chess-v0": True}
    assert shown["known_ids_error"] is None
    assert main(["envs", "show", "tests.unit.test_cli:HubEnv"]) == 0
    out = capsys.readouterr().out
    assert "Ids it can run offline (2; env_id=ID):\n  Maze-v0, Chess-v0\n" in out
    assert "Ids that need the network (1; env_id=ID):\n  Words-v0\n" in out

    assert main(["envs", "show", "tests.unit.test_cli:MissingHubEnv", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["known_ids"] is None and "pip install 'agenthub[hub]'" in shown["known_ids_error"]
    assert main(["envs", "show", "tests.unit.test_cli:MissingHubEnv"]) == 0
    assert "Its ids cannot be listed: the hub env needs" in capsys.readouterr().out

    assert main(["envs", "show", "math", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["known_ids"] is None, "no hook, no ids"
    assert main(["envs", "show", "math"]) == 0
    assert "Ids" not in capsys.readouterr().out


def test_envs_show_textarena_lists_its_games_by_whether_they_need_network(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["envs", "show", "textarena", "--json"]) == 0
    known = json.loads(capsys.readouterr().out)["known_ids"]
    assert known["TowerOfHanoi-v0"] is True, "a puzzle of its own"
    assert known["Wordle-v0"] is False, "downloads nltk's word list"
    assert main(["envs", "show", "textarena"]) == 0
    offline, online = capsys.readouterr().out.split("Ids that need the network")
    assert "TowerOfHanoi-v0," in offline.split("Ids it can run offline")[1]
    assert "Wordle-v0," in online and "TowerOfHanoi" not in online


def test_envs_list_shows_docstrings_as_written_not_as_markup(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one line per env
    register("hub_game", "tests.unit.test_cli:HubEnv", override=True)
    try:
        assert main(["envs", "list"]) == 0
    finally:
        _registered.pop("hub_game")
    [row] = [line for line in capsys.readouterr().out.splitlines() if "hub_game" in line]
    assert "Plays the games of [a-hub]; agenthub[a-hub] installs it." in row


def test_the_command_line_and_the_trainer_are_made_of_small_units() -> None:
    # Functions under ~60 lines and classes under ~300 read in one screen (STYLE.md 12).
    too_big = []
    for package in ("cli", "trainer"):
        for path in sorted((REPO / "agenthub" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                limit = 300 if isinstance(node, ast.ClassDef) else 60
                if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > limit:
                        too_big.append(f"{path.relative_to(REPO)}: {node.name}, {lines} lines")
    assert not too_big, too_big


def test_a_wrong_env_argument_points_at_envs_show() -> None:
    with pytest.raises(AgentHubError, match=r"`agenthub envs show math` describes them"):
        make("math", max_attempt=2)


def test_bench_lists_the_benchmark_scripts_with_their_summaries(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "--dir", str(REPO / "benchmarks")]) == 0
    out = capsys.readouterr().out
    for script in (REPO / "benchmarks").glob("*.py"):
        # `_models.py` and the like are the scripts' shared helpers, not benchmarks.
        assert (script.stem in out) != script.name.startswith("_"), script.name
    assert "Trajectories per second through the Ray queue" in out


def test_bench_runs_a_script_with_its_arguments_and_exit_code(tmp_path: Path) -> None:
    (tmp_path / "echo_ratio.py").write_text(
        '"""Prints its arguments, then a ratio."""\n'
        "import sys\n"
        "print(' '.join(sys.argv[1:]))\n"
        "print('ratio: 1.50')\n"
        "sys.exit(3)\n"
    )
    result = agenthub("bench", "--dir", str(tmp_path), "echo_ratio", "--items", "10")
    assert result.returncode == 3, result.stderr
    assert result.stdout.splitlines() == ["--items 10", "ratio: 1.50"]


def test_bench_unknown_name_or_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "queue.py").write_text('"""A benchmark."""\n')
    result = agenthub("bench", "--dir", str(tmp_path), "nope")
    assert result.returncode == 1
    assert "no benchmark named 'nope'" in result.stderr and "queue" in result.stderr
    missing = agenthub("bench", "--dir", str(tmp_path / "absent"))
    assert missing.returncode == 1 and "no such folder" in missing.stderr


def test_envs_check_passes_and_fails_with_exit_codes(
    fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "nan.jsonl").write_text('{"prompt": "p", "label": "nan"}\n')
    good = main(
        [
            "envs",
            "check",
            "reward_func",
            f"reward_func={fixtures / 'reward_plain.py'}",
            "--tasks",
            str(fixtures / "tasks.jsonl"),
        ]
    )
    assert good == 0 and "keeps the agenthub Env contract" in capsys.readouterr().err
    bad = main(
        [
            "envs",
            "check",
            "reward_func",
            f"reward_func={fixtures / 'reward_broken.py'}",
            "--tasks",
            str(tmp_path / "nan.jsonl"),
        ]
    )
    assert bad == 1 and "must be a finite number" in capsys.readouterr().err


def test_envs_check_reports_a_bug_in_tasks_as_check_env_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # It asked the env for a task before check_env, and a bug there was a traceback.
    assert main(["envs", "check", "tests.unit._envs:IdlessTaskEnv"]) == 1
    err = capsys.readouterr().err
    assert "env.tasks('train') raised ValidationError" in err and "_envs.py:" in err


def test_envs_check_with_an_empty_task_file_fails(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    result = agenthub("envs", "check", "math", "--tasks", str(tmp_path / "empty.jsonl"))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "no tasks to check" in result.stderr and "keeps the agenthub" not in result.stderr


def test_envs_check_names_a_task_path_that_is_no_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "check", "math", "--tasks", "/dev/null"]) == 1
    assert "task file /dev/null is not a regular file" in capsys.readouterr().err


def test_output_into_a_pipe_closed_early_ends_quietly() -> None:
    # `agenthub envs list --json | head -c 300`: the reader is gone before the output is
    # written, here before the command has even started, so the write meets a closed pipe.
    command = [sys.executable, "-m", "agenthub", "envs", "list", "--json"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        err = process.stderr.read().decode()
    assert process.returncode == 1 and err == ""


@pytest.mark.parametrize("reader_gone", [False, True])
@pytest.mark.parametrize("stdout", ["pipe", "socket"])
def test_only_stdout_whose_reader_left_is_taken_for_a_quiet_end(
    reader_gone: bool, stdout: str
) -> None:
    # Any BrokenPipeError ended the command with exit 1 and not a word, one from an env's own
    # subprocess pipe included.
    code = (
        "import sys, time; time.sleep(0.5); from agenthub.cli._main import _stdout_reader_gone;"
        "print(_stdout_reader_gone(), file=sys.stderr)"
    )
    ours, theirs = socket.socketpair() if stdout == "socket" else (None, subprocess.PIPE)
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=theirs, stderr=subprocess.PIPE
    ) as process:
        assert process.stderr is not None
        reader = ours or process.stdout
        assert reader is not None
        if stdout == "socket":
            assert isinstance(theirs, socket.socket)
            theirs.close()
        if reader_gone:
            reader.close()
        said = process.stderr.read().decode().strip()
    if ours is not None:
        ours.close()
    assert said == str(reader_gone)


def test_envs_check_of_an_env_blocking_the_loop_for_good_fails_past_the_timeout() -> None:
    # It printed nothing and hung: only the loop can end a call's timeout, and it never ran.
    # The call blocks for 11 days: that the command returns at all (within `agenthub`'s 60 s)
    # shows the check gave up on it rather than waiting.
    env = ["tests.unit._envs:BlockingEnv", "where=step", "block_s=1000000"]
    result = agenthub("envs", "check", *env, "--timeout", "0.5")
    assert result.returncode == 1
    message = " ".join(result.stderr.split())
    assert "step #1 of task 'train-0' with action '' has blocked the event loop" in message
    assert "_envs.py:" in message and "anyio.to_thread.run_sync" in message, message


def test_envs_check_of_a_task_source_that_blocks_for_good_fails_past_the_timeout() -> None:
    # Splits were read ahead in a thread, where no watchdog looked and nothing could end it.
    # The source blocks for good: that the command returns at all is the point.
    result = agenthub("envs", "check", "tests.unit._envs:StallingTasksEnv", "--timeout", "0.5")
    assert result.returncode == 1
    message = " ".join(result.stderr.split())
    assert "env.tasks('train') has blocked the event loop" in message, message
    assert "give its reads a timeout" in message, message


def test_envs_check_refuses_a_timeout_that_is_not_above_zero() -> None:
    result = agenthub("envs", "check", "math", "--timeout", "0")
    assert result.returncode == 1
    assert result.stderr.startswith("agenthub: error: --timeout 0: must be above 0")


def test_unknown_env_is_a_clear_error_not_a_traceback() -> None:
    result = agenthub("envs", "check", "no_such_env")
    assert result.returncode == 1
    assert result.stderr.startswith("agenthub: error: no environment 'no_such_env'")
    assert "Traceback" not in result.stderr


def test_envs_check_says_a_broken_dataset_is_the_file_s_fault_not_the_env_s(
    tmp_path: Path,
) -> None:
    (tmp_path / "bad.jsonl").write_text("not json\n")
    reward = f"reward_func={REPO / 'tests' / 'fixtures' / 'reward_plain.py'}"
    for dataset, message in (
        ("bad.jsonl", "bad.jsonl:1 is not valid JSON"),
        ("gone.jsonl", "dataset={tmp}/gone.jsonl: the task file does not exist"),
    ):
        result = agenthub("envs", "check", "reward_func", reward, f"dataset={tmp_path / dataset}")
        assert result.returncode == 1 and "contract" not in result.stderr, result.stderr
        assert result.stderr.startswith("agenthub: error: ")
        assert message.format(tmp=tmp_path) in result.stderr


def test_envs_check_fails_on_a_bad_line_past_the_tasks_it_plays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [f'{{"prompt": "{n}+1?", "label": "{n + 1}"}}' for n in range(9)]
    (tmp_path / "good.jsonl").write_text("\n".join(lines) + "\n")
    lines[1] = "{not json"
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    files = [f"dataset={tmp_path / 'good.jsonl'}", f"eval_dataset={tmp_path / 'bad.jsonl'}"]
    assert main(["envs", "check", "math", *files]) == 1
    err = capsys.readouterr().err
    assert "bad.jsonl:2 is not valid JSON" in err and "keeps the agenthub" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["math", "bogus=1"], "could not be built with {'bogus': 1}"),
        (["math", "--tasks", "{tmp}/gone.jsonl"], "gone.jsonl does not exist"),
        (["code_exec", "--tasks", "{tmp}/tasks.jsonl"], "tasks.jsonl:2 is not valid JSON"),
        (["math", "--tasks", "{tmp}/tasks.jsonl", "bogus=1"], "unexpected keyword argument"),
    ],
)
def test_eval_names_a_wrong_env_argument_or_task_file_without_a_traceback(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "Say hi", "label": "hi"}\nnot json\n')
    result = agenthub("eval", "--env", *(a.format(tmp=tmp_path) for a in args))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("agenthub: error: ") and message in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [(["nope"], "no environment 'nope'"), (["math", "bogus=1"], "unexpected keyword argument")],
)
def test_repl_names_a_wrong_env_before_it_loads_the_model(
    tmp_path: Path, args: list[str], message: str
) -> None:
    # The model directory is no model either: the env's error must come first, as the model
    # would otherwise load (or on a first run be built, for minutes) before the typo is found.
    result = agenthub("repl", "--model", str(tmp_path), "--env", *args)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("agenthub: error: ") and message in result.stderr


def test_an_error_raised_on_purpose_in_a_ray_actor_reads_as_itself() -> None:
    exceptions = pytest.importorskip("ray.exceptions", reason="Ray comes with the train extra")
    cause = AgentHubError("the sandbox image is missing; run scripts/setup.sh")
    wrapped = exceptions.RayTaskError("start", "Traceback ...\n  File x.py", cause)
    raised = wrapped.as_instanceof_cause()  # what ray.get raises in the driver
    assert isinstance(raised, AgentHubError) and "File x.py" in str(raised)
    assert error_message(raised) == "the sandbox image is missing; run scripts/setup.sh"
    assert error_message(cause) == str(cause)


def test_envs_check_of_an_env_without_tasks_asks_for_a_task_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def reward_func(queries, prompts, labels):\n    return [0.0] * len(queries)\n"
    )
    assert main(["envs", "check", "reward_func", f"reward_func={reward}"]) == 1
    assert "has no tasks of its own to check with: pass --tasks FILE" in capsys.readouterr().err
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "Say hi", "label": "hi"}\n')
    check = ["envs", "check", "reward_func", f"reward_func={reward}"]
    assert main([*check, "--tasks", str(tmp_path / "tasks.jsonl")]) == 0


def test_a_task_file_is_read_with_the_field_names_the_env_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agenthub.agents._run_dir import load_tasks
    from agenthub.repl._tasks import TaskSource

    reward = tmp_path / "reward.py"
    reward.write_text(
        "def reward_func(queries, prompts, labels):\n"
        "    return [float(label in query) for query, label in zip(queries, labels)]\n"
    )
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "Say hi", "answer": "hi"}\n')
    kwargs = {"reward_func": str(reward), "input_key": "question", "label_key": "answer"}
    pairs = [f"{key}={value}" for key, value in kwargs.items()]

    assert main(["envs", "check", "reward_func", *pairs, "--tasks", str(tasks)]) == 0
    (task,) = load_tasks("reward_func", kwargs, tasks_file=str(tasks), split="", limit=None)
    assert (task.prompt, task.label) == ("Say hi", "hi")
    broken = "tests.unit._envs:DictTasksEnv"
    with pytest.raises(AgentHubError, match=r"env.tasks\(\) yielded dict, not agenthub.Task"):
        load_tasks(broken, {}, tasks_file=None, split="", limit=1)
    source = TaskSource(lambda: make("reward_func", **kwargs), tasks_file=str(tasks),
                        split="held_out", env_kwargs=kwargs)  # fmt: skip
    task = anyio.run(source.get, 0)
    assert (task.prompt, task.label) == ("Say hi", "hi")


def test_bad_key_value_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "check", "reward_func", "oops"]) == 1
    assert "must look like KEY=VALUE" in capsys.readouterr().err


def test_scaffold_writes_a_package_with_entry_point(tmp_path: Path) -> None:
    written = scaffold("my-game", tmp_path / "pkg")
    names = sorted(str(p.relative_to(tmp_path / "pkg")) for p in written)
    assert names == [
        "README.md",
        "pyproject.toml",
        "src/my_game/__init__.py",
        "src/my_game/env.py",
        "tests/test_my_game.py",
    ]
    pyproject = (tmp_path / "pkg" / "pyproject.toml").read_text()
    assert '[project.entry-points."agenthub.envs"]\nmy-game = "my_game.env:MyGameEnv"' in pyproject
    for path in written:
        if path.suffix == ".py":
            compile(path.read_text(), str(path), "exec")


def test_the_scaffolded_env_documents_its_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scaffold("doc-game", tmp_path / "pkg")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg" / "src"))
    assert main(["envs", "show", "doc_game.env:DocGameEnv", "--json"]) == 0
    arguments = json.loads(capsys.readouterr().out)["arguments"]
    assert [(a["name"], a["default"], bool(a["description"])) for a in arguments] == [
        ("high", 100, True),
        ("max_turns", 8, True),
        ("num_tasks", 1000, True),
    ]


def test_scaffold_with_tools_writes_a_tool_env_whose_tests_pass(tmp_path: Path) -> None:
    assert main(["env", "init", "big-sums", "--tools", "--dir", str(tmp_path / "pkg")]) == 0
    env_py = (tmp_path / "pkg" / "src" / "big_sums" / "env.py").read_text()
    assert "class BigSumsEnv(ToolEnv):" in env_py
    assert "by calling tools" in (tmp_path / "pkg" / "README.md").read_text()
    # Beside a plain scaffold, as in a repository of several envs: both packages' own tests
    # run in one session, but those that need them pip-installed (the entry point).
    assert main(["env", "init", "guess-it", "--dir", str(tmp_path / "other")]) == 0
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "not registered",
         str(tmp_path / "pkg" / "tests"), str(tmp_path / "other" / "tests")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(str(tmp_path / d / "src") for d in ("pkg", "other")),
        },
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    assert "4 passed, 2 deselected" in result.stdout


def test_envs_list_gives_the_whole_first_paragraph_of_a_docstring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agenthub.cli._envs import describe

    scaffold("wrapped-doc", tmp_path / "pkg", tools=True)
    monkeypatch.syspath_prepend(str(tmp_path / "pkg" / "src"))
    text, ok = describe("wrapped_doc.env:WrappedDocEnv")
    assert ok and text.endswith(".") and "\n" not in text and "  " not in text


@pytest.mark.parametrize("name", ["My Game", "1st", "a--b", "", "x/y"])
def test_scaffold_rejects_bad_names(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["env", "init", name, "--dir", str(tmp_path / "x")]) == 1
    assert "not a valid environment name" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("math", "environment id 'math' is already declared by package 'agenthub'"),
        ("random", "the module 'random', which is in Python's standard library"),
        ("pydantic", "Python already imports a module of that name"),
        ("import", "the module 'import', which is a Python keyword"),
        ("class", "`from class.env import ...` is a syntax error"),
    ],
)
def test_scaffold_refuses_names_that_would_clash_once_installed(
    tmp_path: Path, name: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["env", "init", name, "--dir", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err
    assert why in err and f"choose another name, e.g. 'my-{name}'" in err
    assert not (tmp_path / "x").exists()


def test_a_soft_keyword_is_a_name_the_scaffolded_package_can_import(tmp_path: Path) -> None:
    scaffold("match", tmp_path / "pkg")
    init = tmp_path / "pkg" / "src" / "match" / "__init__.py"
    compile(init.read_text(), str(init), "exec")
    assert "from match.env import MatchEnv" in init.read_text()


def test_scaffold_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    assert main(["env", "init", "game", "--dir", str(tmp_path)]) == 1
    assert "already exists and is not empty" in capsys.readouterr().err
    assert (tmp_path / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{tmp}/gone.py"], "FILE {tmp}/gone.py does not exist"),
        (["{tmp}"], "FILE {tmp} is a directory"),
        (["{tmp}/latin1.py"], "FILE {tmp}/latin1.py is not UTF-8 text"),
        (["--stdin", "{tmp}/gone.txt", "{tmp}/prog.py"], "--stdin {tmp}/gone.txt does not exist"),
        (["--stdin", "{tmp}", "{tmp}/prog.py"], "--stdin {tmp} is a directory"),
    ],
)
def test_sandbox_run_names_a_file_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "prog.py").write_text("print(input())\n")
    (tmp_path / "latin1.py").write_bytes(b"print('caf\xe9')\n")
    code = main(
        ["sandbox", "run", "--backend", "unisolated", *(a.format(tmp=tmp_path) for a in args)]
    )
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("agenthub: error: ") and err.count("\n") == 1, err
    assert message.format(tmp=tmp_path) in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "0"], "--timeout 0: give a finite number of seconds above 0"),
        (["--timeout", "-1"], "--timeout -1: give a finite number"),
        (["--timeout", "nan"], "--timeout nan: give a finite number"),
        (["--timeout", "inf"], "--timeout inf: give a finite number"),
        (["--memory-mb", "0"], "--memory-mb 0: give a positive number of MiB"),
    ],
)
def test_sandbox_run_names_a_limit_that_is_not_positive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "prog.py").write_text("print('hi')\n")
    code = main(["sandbox", "run", "--backend", "unisolated", *args, str(tmp_path / "prog.py")])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("agenthub: error: ") and err.count("\n") == 1, err
    assert message in err


def test_serve_rm_names_a_model_directory_without_a_model_before_loading_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for model in (str(tmp_path / "nodir"), str(tmp_path)):
        assert main(["serve-rm", "--model", model, "--device", "cpu"]) == 1
        err = capsys.readouterr().err
        assert err == (
            f"agenthub: error: --model {model}: no config.json there; give a local Hugging Face "
            "sequence-classification model directory\n"
        )


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("cpu", "holds no loadable sequence-classification model and tokenizer: "),
        ("bogus", "device 'bogus' is not a torch one; use cpu, cuda or cuda:N"),
    ],
)
def test_serve_rm_says_in_one_line_why_a_model_cannot_be_served(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], device: str, message: str
) -> None:
    pytest.importorskip("transformers", reason="serving a model needs the train extra")
    (tmp_path / "config.json").write_text("{}")
    assert main(["serve-rm", "--model", str(tmp_path), "--device", device]) == 1
    err = capsys.readouterr().err
    assert err.startswith("agenthub: error: ") and err.count("\n") == 1, err
    assert message in err


def test_serve_rm_says_when_its_port_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    reward = str(REPO / "tests" / "fixtures" / "reward_plain.py")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["serve-rm", "--reward-func", reward, "--port", str(port)]) == 1
    assert capsys.readouterr().err == (
        f"agenthub: error: cannot listen on 127.0.0.1:{port}: Address already in use; pick "
        "another --port, or stop what listens there\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "99999"], "--port 99999: give a port from 1 to 65535"),
        (["--port", "0"], "--port 0: give a port from 1 to 65535"),
        (["--max-batch-size", "0"], "--max-batch-size 0: give a number of at least 1"),
        (["--max-length", "-5"], "--max-length -5: give a number of at least 1"),
        (
            ["--reward-processes", "-1"],
            "--reward-processes -1: give 0 (a thread) or more worker processes, with --reward-func",
        ),
    ],
)
def test_serve_rm_rejects_option_values_it_cannot_serve_with(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    reward = str(REPO / "tests" / "fixtures" / "reward_plain.py")
    assert main(["serve-rm", "--reward-func", reward, *args]) == 1
    assert capsys.readouterr().err == f"agenthub: error: {message}\n"
