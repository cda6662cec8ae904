import threading
from pathlib import Path

import anyio
import pytest

from agenthub import AgentFuncError, Task, make
from agenthub.testing import check_env

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "agent_file",
    ["agent_func_new.py", "agent_func_step.py"],  # the current form; the first, a step function
)
def test_agent_files_keep_the_contract(fixtures: Path, agent_file: str) -> None:
    check_env(
        lambda: make(
            "openrlhf_agent",
            agent_func=str(fixtures / agent_file),
            dataset=str(fixtures / "tasks.jsonl"),
        )
    )


async def test_multi_turn_text_flows_as_in_openrlhf(fixtures: Path) -> None:
    env = make("openrlhf_agent", agent_func=str(fixtures / "agent_func_new.py"))
    observation, _ = await env.reset(Task(id="t", prompt="Q: 2+3? A:", label="5"))
    assert observation == ""
    first = await env.step(" 4")
    assert (first.observation, first.reward, first.done) == (
        "\nuser: wrong, try again\nassistant: ",
        0.0,
        False,
    )
    second = await env.step(" 5")
    assert (second.reward, second.score, second.terminated) == (1.0, 1.0, True)
    assert second.extra_logs == {"turn": 2.0}
    with pytest.raises(RuntimeError, match="after the episode ended"):
        await env.step("again")
    await env.aclose()
    await env.aclose()


async def test_a_task_without_label_reaches_the_agent_as_empty_text(tmp_path: Path) -> None:
    # OpenRLHF passes "" when the dataset has no label, and agent files rely on it being text
    path = tmp_path / "agent_func.py"
    path.write_text(
        "from openrlhf.utils.agent import AgentInstanceBase\n"
        "class AgentInstance(AgentInstanceBase):\n"
        "    async def reset(self, states, **kw):\n"
        "        self.label = states['label'].strip()\n"
        "        return {'observation': states['observation']}\n"
        "    async def step(self, states, **kw):\n"
        "        label = states['label'].strip()\n"
        "        return {'rewards': float(label == self.label == ''),\n"
        "                'environment_feedback': '', 'done': True}\n"
    )
    env = make("openrlhf_agent", agent_func=str(path))
    await env.reset(Task(id="t", prompt="p"))
    assert (await env.step("x")).reward == 1.0
    await env.aclose()


async def test_step_function_text_flows_as_in_openrlhf(fixtures: Path) -> None:
    env = make("openrlhf_agent", agent_func=str(fixtures / "agent_func_step.py"))
    observation, _ = await env.reset(Task(id="t", prompt="Human: 2+3?\n\nAssistant: ", label="5"))
    assert observation == ""
    first = await env.step("It is 4.")
    assert (first.observation, first.reward, first.done) == (
        "\n\nHuman: [INCORRECT] Please try again.\n</s>\n\nAssistant: ",
        0.0,
        False,
    )
    second = await env.step("It is 5.")
    assert (second.observation, second.reward, second.score) == (
        "\n\nHuman: [CORRECT]\n</s>",
        1.0,
        1.0,
    )
    assert second.terminated and second.extra_logs == {"attempts": 2.0}
    # a new episode runs a fresh copy of the file: its globals start over
    await env.reset(Task(id="t", prompt="p", label="5"))
    steps = [await env.step("no idea") for _ in range(3)]
    assert [s.extra_logs["attempts"] for s in steps] == [1.0, 2.0, 3.0]
    assert [s.terminated for s in steps] == [False, False, True]
    await env.aclose()


async def test_step_function_gets_the_whole_text_so_far(tmp_path: Path) -> None:
    path = tmp_path / "agent_func.py"
    path.write_text(
        "async def step(observation, action, label, **kwargs):\n"
        "    seen = f' [{len(observation)} chars, label {label!r}, {sorted(kwargs)}]'\n"
        "    return {'rewards': 0.0, 'next_observation': observation + action + seen,\n"
        "            'done': False}\n"
    )
    env = make("openrlhf_agent", agent_func=str(path))
    await env.reset(Task(id="t", prompt="Q?"))
    first = await env.step(" a")
    assert first.observation == " [2 chars, label '', ['sampling_params']]"
    second = await env.step(" b")
    assert second.observation.startswith(f" [{len('Q? a' + first.observation)} chars")
    await env.aclose()


async def test_blocking_agents_do_not_stall_each_other(fixtures: Path, tmp_path: Path) -> None:
    # Each step blocks its thread until all 8 steps are blocked at once: only steps run side
    # by side can all meet (one that waited for another would time out with reward 0).
    async def episode(i: int) -> float:
        env = make("openrlhf_agent", agent_func=str(fixtures / "agent_func_blocking.py"))
        try:
            await env.reset(Task(id=str(i), prompt="p", label=f"meet:{tmp_path}:8"))
            return (await env.step("x")).reward
        finally:
            await env.aclose()

    rewards: list[float] = []
    async with anyio.create_task_group() as group:
        for i in range(8):
            group.start_soon(lambda i=i: _append(rewards, episode(i)))
    assert rewards == [0.5] * 8, "blocking steps must run side by side"
    assert not [t for t in threading.enumerate() if t.name.startswith("openrlhf-agent-")]


async def _append(out: list[float], coroutine) -> None:  # type: ignore[no-untyped-def]
    out.append(await coroutine)


async def test_agent_exceptions_become_agent_func_errors(fixtures: Path) -> None:
    env = make("openrlhf_agent", agent_func=str(fixtures / "agent_func_blocking.py"))
    await env.reset(Task(id="t", prompt="p", label="raise"))
    with pytest.raises(
        AgentFuncError, match="AgentInstance step raised RuntimeError: tool crashed"
    ):
        await env.step("x")
    await env.aclose()


async def test_cancelled_step_leaves_env_usable(fixtures: Path) -> None:
    env = make("openrlhf_agent", agent_func=str(fixtures / "agent_func_blocking.py"))
    await env.reset(Task(id="t", prompt="p"))
    with anyio.move_on_after(0.05):
        await env.step("x")
    await env.reset(Task(id="t", prompt="p"))
    assert (await env.step("x")).reward == 0.5
    await env.aclose()


def test_an_executor_overriding_execute_is_refused_not_skipped(fixtures: Path) -> None:
    # agenthub runs reset/step itself; running the file without its execute() would train on
    # rewards the file never gives
    with pytest.raises(AgentFuncError) as caught:
        make("openrlhf_agent", agent_func=str(fixtures / "agent_func_custom_executor.py"))
    assert "AgentExecutor overrides execute(), which agenthub never runs" in str(caught.value)
    assert "Move that logic into AgentInstance.step" in str(caught.value)


PASS_THROUGH = {
    "as OpenRLHF's examples wrote it": (
        "    async def execute(self, prompt, label, sampling_params):\n"
        '        """Custom running logic would go here."""\n'
        "        # You could override the execute function to add custom logic\n"
        "        return await super().execute(prompt, label, sampling_params)\n"
    ),
    "with keywords and *args": (
        "    async def execute(self, prompt, *args, label=None, **kwargs):\n"
        "        return await super(AgentExecutor, self).execute(\n"
        "            prompt, *args, label=label, **kwargs\n"
        "        )\n"
    ),
}


@pytest.mark.parametrize("execute", PASS_THROUGH.values(), ids=PASS_THROUGH)
async def test_an_execute_that_only_calls_super_still_runs(tmp_path: Path, execute: str) -> None:
    path = tmp_path / "agent_func.py"
    path.write_text(EXECUTOR_FILE + execute)
    env = make("openrlhf_agent", agent_func=str(path))
    await env.reset(Task(id="t", prompt="Q: 2+3? A:", label="5"))
    step = await env.step(" 5")
    await env.aclose()
    assert (step.reward, step.terminated) == (1.0, True)


EXECUTOR_FILE = (
    "from openrlhf.utils.agent import AgentExecutorBase, AgentInstanceBase\n"
    "class AgentInstance(AgentInstanceBase):\n"
    "    async def step(self, states, **kw):\n"
    "        return {'rewards': 1.0, 'environment_feedback': '', 'done': True}\n"
    "class AgentExecutor(AgentExecutorBase):\n"
    "    def __init__(self, max_steps, max_length, llm_engine, result_queue):\n"
    "        super().__init__(AgentInstance, max_steps, max_length, llm_engine, result_queue)\n"
)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x = 1\n", "defines no AgentInstance class"),
        (
            "def step(observation, action, label, **kwargs):\n    return {}\n",
            "its module-level step is not `async def step\\(observation, action, label",
        ),
        (
            "async def step(observation, action, label, **kwargs):\n"
            "    return {'rewards': 1.0, 'environment_feedback': '', 'done': True}\n",
            "must return a dict with 'rewards', 'next_observation' and 'done'",
        ),
        (
            "async def step(observation, action, label, **kwargs):\n"
            "    return {'rewards': 1.0, 'next_observation': observation.upper() + action}\n",
            "does not start with the observation and action it was given "
            "\\(at character 0, 'px' became 'Px'\\)",
        ),
        (
            "async def step(observation, action, label, **kwargs):\n    return 1 / 0\n",
            "step\\(observation, action, label\\) raised ZeroDivisionError",
        ),
        (  # an executor that samples the model itself, like OpenRLHF's OpenAI-server example
            "from openrlhf.utils.agent import AgentExecutorBase\n"
            "class AgentExecutor(AgentExecutorBase):\n"
            "    async def execute(self, prompt, label, sampling_params, max_length,\n"
            "                      hf_tokenizer, llm_engine):\n"
            "        return await self.run_agent(prompt, label)\n",
            "AgentExecutor overrides execute\\(\\), which agenthub never runs: it runs the "
            "AgentInstance's reset/step itself",
        ),
        (
            EXECUTOR_FILE + "    async def execute(self, prompt, label, sampling_params):\n"
            "        return await super().execute(label, prompt, sampling_params)\n",
            "overrides execute",
        ),
        ("import not_installed_thing\n", "raised ModuleNotFoundError"),
        (
            "from openrlhf.utils.agent import AgentInstanceBase\n"
            "class AgentInstance(AgentInstanceBase):\n"
            "    async def reset(self, states, **kw):\n        return {'observation': 'other'}\n"
            "    async def step(self, states, **kw):\n        return {}\n",
            "must return {'observation': text} where the text starts with the prompt",
        ),
        (
            "from openrlhf.utils.agent import AgentInstanceBase\n"
            "class AgentInstance(AgentInstanceBase):\n"
            "    async def step(self, states, **kw):\n        return {'done': True}\n",
            "must return a dict with 'rewards'",
        ),
        (
            "from openrlhf.utils.agent import AgentInstanceBase\n"
            "class AgentInstance(AgentInstanceBase):\n"
            "    async def step(self, states, **kw):\n"
            "        return {'rewards': 'high', 'environment_feedback': '', 'done': True}\n",
            "rewards\\[0\\] = 'high'",
        ),
    ],
)
async def test_broken_agent_files_give_clear_errors(
    tmp_path: Path, source: str, message: str
) -> None:
    path = tmp_path / "agent_func.py"
    path.write_text(source)
    with pytest.raises(AgentFuncError, match=message):
        env = make("openrlhf_agent", agent_func=str(path))
        try:
            await env.reset(Task(id="t", prompt="p"))
            await env.step("x")
        finally:
            await env.aclose()


@pytest.mark.parametrize("method", ["reset", "step"])
def test_a_plain_def_reset_or_step_is_refused_when_loaded(tmp_path: Path, method: str) -> None:
    # OpenRLHF awaits both; a plain def would fail there on the first episode.
    path = tmp_path / "agent_func.py"
    path.write_text(
        "from openrlhf.utils.agent import AgentInstanceBase\n"
        "class AgentInstance(AgentInstanceBase):\n"
        f"    {'' if method == 'reset' else 'async '}def reset(self, states, **kwargs):\n"
        "        return states\n"
        f"    {'' if method == 'step' else 'async '}def step(self, states, **kwargs):\n"
        "        return {'rewards': 1.0, 'environment_feedback': '', 'done': True}\n"
    )
    with pytest.raises(AgentFuncError) as raised:
        make("openrlhf_agent", agent_func=str(path))
    assert str(raised.value) == (
        f"{path}: AgentInstance.{method} is a plain `def`, and OpenRLHF awaits an agent's reset "
        f"and step: make it `async def {method}(self, states, **kwargs)` (blocking code inside "
        "it is fine: each episode's agent runs on an event loop of its own)"
    )


async def test_an_async_step_under_a_wrapping_decorator_still_runs(tmp_path: Path) -> None:
    path = tmp_path / "agent_func.py"
    path.write_text(
        "import functools\n"
        "from openrlhf.utils.agent import AgentInstanceBase\n"
        "def logged(step):\n"
        "    @functools.wraps(step)\n"
        "    def wrapper(*args, **kwargs):\n"
        "        return step(*args, **kwargs)\n"
        "    return wrapper\n"
        "class AgentInstance(AgentInstanceBase):\n"
        "    @logged\n"
        "    async def step(self, states, **kwargs):\n"
        "        return {'rewards': 1.0, 'environment_feedback': '', 'done': True}\n"
    )
    env = make("openrlhf_agent", agent_func=str(path))
    try:
        await env.reset(Task(id="t", prompt="p"))
        assert (await env.step("x")).reward == 1.0
    finally:
        await env.aclose()


def test_an_agent_file_importing_more_of_openrlhf_is_told_it_is_not_installed(
    tmp_path: Path,
) -> None:
    (tmp_path / "grading.py").write_text("import openrlhf.models\n")
    path = tmp_path / "agent_func.py"
    path.write_text(
        "from openrlhf.utils.agent import AgentInstanceBase\n"
        "from openrlhf.utils import get_tokenizer\n"
    )
    with pytest.raises(AgentFuncError) as raised:
        make("openrlhf_agent", agent_func=str(path))
    assert str(raised.value) == (
        f"agent file {path} imports from OpenRLHF (line 2, "
        "`from openrlhf.utils import get_tokenizer`), which is not installed: without it, "
        "agenthub provides only openrlhf.utils.agent's AgentInstanceBase, AgentExecutorBase "
        "and MultiTurnAgentExecutor, to agent files, and openrlhf.utils's extract_boxed_answer "
        "and grade_answer, to agent and reward files. pip install openrlhf, or drop that import"
    )
    path.write_text("import grading\n")  # the import is in a module the file imports
    with pytest.raises(
        AgentFuncError, match=r"\(.*grading\.py line 1, `import openrlhf\.models`\)"
    ):
        make("openrlhf_agent", agent_func=str(path))
