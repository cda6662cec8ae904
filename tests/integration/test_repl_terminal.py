"""`agenthub repl` as a person uses it: a real terminal (pexpect), readline, the default model
in vLLM, a plugin env found through its entry point, and code_exec in the Docker sandbox."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

import agenthub
from agenthub.agents import Trajectory

from ..conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

PROMPT = r"(?:[\w.:-]+ \d+|replay step \d+ \(Enter\)|repl)> |\.\.\.(?:\"\"\")? "
ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]|\r")
UP = "\x1b[A"
# What a Ctrl-C during the engine's start prints comes from a thread of its own, which runs once
# the start's thread lets go of the GIL: a library's import (torch's shared objects) can hold it
# for seconds on a loaded 2-core machine (10 s was not enough on CI). The order is what counts.
STARTING_S = 60
# Printed once the start has taken Ctrl-C over: one typed before it (the REPL may not have run
# since it printed "loading the model" on a busy machine) is an ordinary interrupt of the entry.
START_TAKES_CTRL_C = "Ctrl-C stops this entry once the model is up"


class Terminal:
    """One `agenthub repl` in a pseudo-terminal; `send` returns what a line printed."""

    def __init__(self, args: list[str], cwd: Path, pythonpath: str) -> None:
        env = {**os.environ, "PYTHONPATH": pythonpath, "COLUMNS": "200"}
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "agenthub", "repl", *args],
            cwd=str(cwd),
            env=env,
            encoding="utf-8",
            timeout=120,
            dimensions=(60, 200),
        )
        self.transcript: list[str] = []
        self.opening = self._wait(180)

    def _wait(self, timeout: float) -> str:
        self.child.expect(PROMPT, timeout=timeout)
        out = ANSI.sub("", self.child.before or "")
        self.transcript.append(out + ANSI.sub("", self.child.after or ""))
        return out

    def send(self, line: str, timeout: float = 120) -> str:
        self.child.send(line + "\r")
        return self._wait(timeout)

    def interrupt(self) -> str:
        """Ctrl-C; return the prompt it comes back to."""
        self.child.sendcontrol("c")
        self._wait(30)
        return str(self.child.after)

    def quit(self) -> None:
        self.child.send(":quit\r")
        self.child.expect(pexpect.EOF, timeout=60)
        self.child.close()
        assert self.child.exitstatus == 0, "".join(self.transcript)[-3000:]


@pytest.fixture
def plugin_path(tmp_path: Path) -> Iterator[str]:
    """A plugin package's metadata declaring `repl-guess` in the `agenthub.envs` group, found on
    PYTHONPATH the way an installed plugin is found in site-packages."""
    site = tmp_path / "site"
    info = site / "agenthub_repl_guess-0.1.dist-info"
    info.mkdir(parents=True)
    info.joinpath("METADATA").write_text(
        "Metadata-Version: 2.1\nName: agenthub-repl-guess\nVersion: 0.1\n"
    )
    info.joinpath("entry_points.txt").write_text(
        "[agenthub.envs]\nrepl-guess = tests.unit._repl_envs:GuessEnv\n"
    )
    yield os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")])


def replay_all(term: Terminal) -> str:
    out = ""
    for _ in range(20):
        out += term.send("")
        if "replay done" in out:
            return out
    raise AssertionError(f"the replay never finished:\n{out}")


def test_a_session_on_a_plugin_env(tmp_path: Path, plugin_path: str) -> None:
    """Typed and generated steps, an env's error, Ctrl-C while the model loads, settings and
    their history, tokens, undo, save, load and a replay: one session, one model start."""
    saved = tmp_path / "saved.jsonl"
    term = Terminal(["--env", "repl-guess", "--max-reply-tokens", "24"], tmp_path, plugin_path)
    try:
        assert "Guess my number from 1 to 10." in term.opening
        assert "Your first guess?" in term.opening
        term.send("3")
        out = term.send("")
        assert "step 1: reward 0  return 0  terminated False  truncated False" in out
        assert "Higher." in out and '"guesses": 1' in out

        assert term.send("half a thought") == "half a thought\n"
        assert term.interrupt() == "repl-guess 2> "  # Ctrl-C drops the half-typed action

        term.send("boom")
        out = term.send("")
        assert "env_error: step raised RuntimeError: the env blew up on purpose" in out
        assert "Traceback (most recent call last)" in out

        assert "max_tokens 12" in term.send(":set max_tokens 12")
        assert "max_tokens 12" in term.send(UP)  # readline history: the same :set again
        # Ctrl-C while the model loads stops the entry, not the start. It used to kill the
        # engine core (a child in the terminal's process group), the start failing with a
        # 40-line traceback, or to leave vLLM waiting minutes on a dead handshake.
        term.child.send(":gen\r")
        term.child.expect("loading the model", timeout=60)
        term.child.expect(START_TAKES_CTRL_C, timeout=60)
        term.child.sendcontrol("c")
        term.child.expect("the model is still loading", timeout=STARTING_S)
        out = term._wait(300)
        assert "model ready" in out and "interrupted" in out and "Traceback" not in out
        out = term.send(":gen", timeout=120)
        assert "loading the model" not in out, "the model loaded before is the one used"
        assert "sampling: temperature 1  top_p 1  top_k -1  max_tokens 12  seed none" in out
        assert "step 2:" in out

        out = term.send(":tok\t")  # tab completion of commands
        assert "model-sampled (mask 1" in out and "typed by you (mask 0" in out
        assert "|<|im_start|>|" in out or "<|im_start|>" in out
        # A terminal's Ctrl-C goes to its whole process group; the model's engine core, in a
        # group of its own, lives on for the next :gen.
        term.send("half a thought")
        assert term.interrupt() == "repl-guess 3> "

        out = term.send(":undo")
        assert "undone: back at step 1" in out and "Higher." in out
        term.send("6")
        assert "step 2:" in term.send("")
        out = term.send(":gen", timeout=120)
        assert "step 3:" in out

        assert f"saved line 1 of {saved}" in term.send(f":save {saved}")
        out = term.send(f":load {saved}")
        assert "loaded line 1" in out
        out = replay_all(term)
        assert "replaying a typed action" in out and "replaying a model action" in out
        assert "matches the saved one token for token" in out
        term.quit()
    finally:
        term.child.close(force=True)
    trajectory = Trajectory.model_validate_json(saved.read_text())
    assert trajectory.env == "repl-guess" and trajectory.num_turns == 3
    assert 1 in trajectory.loss_mask


def test_a_session_on_code_exec(tmp_path: Path) -> None:
    env = agenthub.make("code_exec")
    task = next(iter(env.tasks("held_out")))
    reference = str(task.metadata["reference"])
    saved = tmp_path / "code.jsonl"
    term = Terminal(
        ["--env", "code_exec", "max_turns=3", "--max-reply-tokens", "96"],
        tmp_path,
        os.environ.get("PYTHONPATH", ""),
    )
    try:
        assert task.id in term.opening
        for line in ('"""', "```python", "print('no idea')", "```"):
            term.send(line)
        out = term.send('"""', timeout=180)
        assert "step 1: reward 0" in out and "failed" in out  # the sandbox's feedback

        out = term.send(":gen", timeout=300)
        assert "model ready" in out and "step 2:" in out
        assert "model-sampled (mask 1" in term.send(":tokens")
        assert "undone: back at step 1" in term.send(":undo", timeout=180)

        term.send('"""')
        for line in reference.splitlines():
            term.send(line)
        out = term.send('"""', timeout=180)
        assert "step 2: reward 1" in out and "terminated True" in out

        term.send(f":save {saved}")
        term.send(f":load {saved}")
        out = replay_all(term)
        assert "matches the saved one token for token" in out
        term.quit()
    finally:
        term.child.close(force=True)
    trajectory = Trajectory.model_validate_json(saved.read_text())
    assert trajectory.reward == 1.0 and trajectory.terminated


def test_a_second_ctrl_c_while_the_model_loads_quits_at_once(
    tmp_path: Path, plugin_path: str
) -> None:
    term = Terminal(["--env", "repl-guess"], tmp_path, plugin_path)
    try:
        term.child.send(":gen\r")
        term.child.expect("loading the model", timeout=60)
        term.child.expect(START_TAKES_CTRL_C, timeout=60)
        term.child.sendcontrol("c")
        term.child.expect("the model is still loading", timeout=STARTING_S)
        term.child.sendcontrol("c")
        term.child.expect("interrupted while the engine started; the REPL quits", STARTING_S)
        term.child.expect(pexpect.EOF, timeout=STARTING_S)
        term.child.close()
        assert term.child.exitstatus == 130
    finally:
        term.child.close(force=True)


def test_bad_env_ids_and_task_numbers_exit_with_a_message(tmp_path: Path) -> None:
    for args, message in [
        (["--env", "no-such-env"], "no environment 'no-such-env'"),
        (["--env", "code_exec", "--task", "100000"], "task 100000 does not exist"),
    ]:
        child = pexpect.spawn(
            sys.executable, ["-m", "agenthub", "repl", *args], cwd=str(tmp_path),
            encoding="utf-8", timeout=120,
        )  # fmt: skip
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 1
        assert message in ANSI.sub("", child.before or "")
