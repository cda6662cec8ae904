"""An env's failure is reported at the line of the user's code to look at, not agenthub's."""

import math
import os
import sysconfig
from pathlib import Path

import anyio
import pytest

import agenthub
from agenthub import AgentFuncError, RewardFuncError, Step, Task, make
from agenthub._tracebacks import RemoteTraceback, blamed, raised_at

pytestmark = pytest.mark.anyio

AGENTHUB = Path(agenthub.__file__).parent
RUNNER = (str(AGENTHUB / "agents" / "_runner.py"), 290, "_env_call")
STEP_INIT = (str(AGENTHUB / "_types.py"), 104, "__post_init__")


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _nan_step() -> Step[str]:
    return Step("", math.nan)


def test_a_step_agenthub_refuses_is_reported_at_the_line_that_built_it() -> None:
    with pytest.raises(ValueError, match="must be finite") as raised:
        _nan_step()
    line = _nan_step.__code__.co_firstlineno + 1
    assert raised_at(raised.value) == f" (raised at {__file__}:{line}, in _nan_step)"


@pytest.mark.parametrize("processes", [None, 0], ids=["worker process", "thread"])
async def test_a_reward_file_s_error_names_the_file_s_line(
    fixtures: Path, processes: int | None
) -> None:
    path = fixtures / "reward_broken.py"
    env = make("reward_func", reward_func=str(path), reward_processes=processes)
    await env.reset(Task(id="case", prompt="p", label="raise"))
    with pytest.raises(RewardFuncError, match="raised KeyError") as raised:
        await env.step("response")
    await env.aclose()
    line = _line_of(path, 'raise KeyError("missing_field")')
    assert raised_at(raised.value) == f" (raised at {path}:{line}, in reward_func)"


async def test_an_agent_file_s_error_names_the_file_s_line(fixtures: Path) -> None:
    path = fixtures / "agent_func_blocking.py"
    env = make("openrlhf_agent", agent_func=str(path))
    await env.reset(Task(id="t", prompt="p", label="raise"))
    with pytest.raises(AgentFuncError, match="tool crashed") as raised:
        await env.step("x")
    await env.aclose()
    line = _line_of(path, 'raise RuntimeError("tool crashed")')
    assert raised_at(raised.value) == f" (raised at {path}:{line}, in step)"


def test_an_installed_plugin_is_named_when_no_file_of_the_user_s_own_is_on_the_way() -> None:
    plugin = "/venv/lib/python3.11/site-packages/guess_number/env.py"
    trace = RemoteTraceback("", [RUNNER, (plugin, 7, "step"), STEP_INIT])
    assert raised_at(trace) == f" (raised at {plugin}:7, in step)"


def test_agenthub_s_own_line_is_named_only_when_nothing_else_is_on_the_way() -> None:
    # A built-in env's bug, run in a thread through anyio: anyio's frame says nothing either.
    thread = (str(Path(anyio.__file__).parent / "_backends" / "_asyncio.py"), 967, "run")
    score = (str(AGENTHUB / "envs" / "reward_func" / "_function.py"), 171, "_score")
    trace = RemoteTraceback("", [RUNNER, thread, score])
    assert raised_at(trace) == f" (raised at {score[0]}:171, in _score)"
    assert raised_at(trace, fallback=False) == ""


def test_a_live_stack_names_the_user_s_line_else_the_plugin_that_calls_a_library() -> None:
    # What blocks an event loop: the innermost frame outside the standard library named
    # httpx's insides where the env's own `httpx.get(...)` is the line to look at.
    ours = os.path.join(os.path.dirname(agenthub.__file__), "agents", "_runner.py")
    site = os.path.join(os.sep, "venv", "lib", "site-packages")
    stdlib = os.path.join(sysconfig.get_paths()["stdlib"], "socket.py")
    plugin = [
        (ours, 10, "play"),
        (os.path.join(site, "my_plugin", "env.py"), 20, "step"),
        (os.path.join(site, "httpx", "_api.py"), 30, "get"),
        (stdlib, 40, "recv_into"),
    ]
    assert blamed(plugin) == 1
    own = [*plugin[:2], (os.path.join(os.sep, "home", "me", "env.py"), 5, "step"), *plugin[2:]]
    assert blamed(own) == 2
    assert blamed([(ours, 10, "play"), (stdlib, 40, "recv_into")]) is None
    # Outside agenthub's first frame are only its callers, the user's own script among them:
    # never the line that blocks.
    script = (os.path.join(os.sep, "home", "me", "run.py"), 3, "<module>")
    assert blamed([script, *plugin]) == 2
    assert blamed([script, *own]) == 3


def test_an_exception_without_a_message_is_described_by_its_type_alone() -> None:
    from agenthub._tracebacks import described

    assert described(KeyError("held_out")) == "KeyError: 'held_out'"
    assert described(NotImplementedError()) == "NotImplementedError"
