"""`agenthub.tools`: schemas from Python functions, calls read from reply text, and `ToolEnv`
running them as a multi-turn environment that `check_env` accepts."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from pydantic import BaseModel

from agenthub import CheckEnvError, Message, Task
from agenthub._returns import EnvReturnError, checked_tools
from agenthub.testing import check_env
from agenthub.tools import ToolCall, ToolEnv, function_schema, parse_tool_calls
from agenthub.wrappers import TurnLimit
from tests.unit._tool_envs import BadTools, Calculator, add

pytestmark = pytest.mark.anyio


def call(name: str, **arguments: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


# -- schemas ----------------------------------------------------------------------------------


def test_a_function_schema_has_its_name_description_and_typed_parameters() -> None:
    assert function_schema(add) == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"type": "integer", "description": "the first addend"},
                    "b": {"type": "integer", "description": "the second addend"},
                },
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    }


class Point(BaseModel):
    x: float
    y: float


def test_schema_of_defaults_optionals_literals_and_models() -> None:
    def plot(
        points: list[Point], style: Literal["line", "dots"] = "line", title: str | None = None
    ) -> str:
        """Plot points.

        Draws them.

        Args:
            points: where
                to draw
            style: how
        Returns:
            a path
        """
        return ""

    schema = function_schema(plot)["function"]
    assert schema["description"] == "Plot points.\n\nDraws them."
    properties = schema["parameters"]["properties"]
    assert properties["points"]["description"] == "where to draw"
    assert properties["style"] == {
        "enum": ["line", "dots"],
        "type": "string",
        "default": "line",
        "description": "how",
    }
    assert properties["title"]["default"] is None and "description" not in properties["title"]
    assert schema["parameters"]["required"] == ["points"]
    assert "title" not in json.dumps(schema["parameters"]["$defs"]).replace('"title":', "")
    json.dumps(schema)  # JSON all the way down


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(*values: int) -> int: ...", "takes \\*values"),
        ("def f(**options: int) -> int: ...", "takes \\*options"),
        ("def f(a: int, /) -> int: ...", "positional-only"),
    ],
)
def test_functions_whose_parameters_cannot_be_named_are_refused(source: str, message: str) -> None:
    scope: dict[str, object] = {}
    exec(source, scope)
    with pytest.raises(TypeError, match=message):
        function_schema(scope["f"])  # type: ignore[arg-type]


def test_type_hints_that_do_not_resolve_say_where_to_define_the_types() -> None:
    class Local(BaseModel):
        x: int

    def f(value: Local) -> int:
        return value.x

    with pytest.raises(TypeError, match="define the types they name at module level"):
        function_schema(f)


# -- calls ------------------------------------------------------------------------------------


def test_calls_are_read_in_order_in_every_accepted_form() -> None:
    text = (
        "Let me compute.\n<tool_call>\n"
        '{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>\n'
        '<tool_call>{"name": "multiply", "arguments": "{\\"a\\": 6}"}</tool_call>'
        '<tool_call>{"name": "now", "parameters": {}}</tool_call>'
        '<tool_call>{"name": "nothing"}</tool_call>'
    )
    assert parse_tool_calls(text) == [
        ToolCall("add", {"a": 2, "b": 3}),
        ToolCall("multiply", {"a": 6}),
        ToolCall("now", {}),
        ToolCall("nothing", {}),
    ]
    assert parse_tool_calls("The answer is 5.") == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<tool_call>{add(2, 3)}</tool_call>", "not valid JSON"),
        ('<tool_call>["add", 2]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "add", "arguments": "{a: 2"}</tool_call>', "arguments are not"),
        ('<tool_call>{"name": "add", "arguments": [2, 3]}</tool_call>', "got list"),
        ('I will call <tool_call>{"name": "add", "arguments": {"a": 2', "not closed"),
    ],
)
def test_calls_that_cannot_be_read_carry_why(text: str, error: str) -> None:
    [bad] = parse_tool_calls(text)
    assert bad.error is not None and error in bad.error


# -- ToolEnv ----------------------------------------------------------------------------------


def test_the_tool_env_passes_check_env() -> None:
    check_env(Calculator())
    check_env(TurnLimit(Calculator(), 2))


async def test_calls_are_answered_with_tool_messages_then_the_answer_is_scored() -> None:
    env = Calculator()
    assert [t["function"]["name"] for t in env.tools] == ["add", "multiply", "divide"]
    assert checked_tools(env) == env.tools
    task = next(iter(env.tasks()))
    assert await env.reset(task, seed=0) == ([], {})
    step = await env.step("First: " + call("add", a=2, b=3) + call("multiply", a=1.5))
    assert step.observation == [
        Message(role="tool", content="5", name="add"),
        Message(role="tool", content="3.0", name="multiply"),
    ]
    assert (step.reward, step.terminated, step.truncated) == (0.0, False, False)
    step = await env.step(call("divide", a=1, b=4))
    assert step.observation == [Message(role="tool", content='{"quotient": 0.25}', name="divide")]
    step = await env.step("The answer is 5.")
    assert (step.observation, step.reward, step.terminated) == ([], 1.0, True)


@pytest.mark.parametrize(
    ("reply", "told"),
    [
        (call("sqrt", x=2), "error: there is no tool named 'sqrt' (tools: add, multiply, divide)"),
        (call("add", a=2), "error: bad arguments for add: b: Field required"),
        (call("add", a=2, b="three"), "error: bad arguments for add: b: Input should be"),
        (call("add", a=2, b=3, c=4), "error: bad arguments for add: c: Extra inputs"),
        (
            call("divide", a=1, b=0),
            "error: divide raised ZeroDivisionError: float division by zero",
        ),
        ("<tool_call>add(2, 3)</tool_call>", "error: the tool call is not valid JSON"),
    ],
)
async def test_a_call_that_cannot_run_is_answered_with_what_went_wrong(
    reply: str, told: str
) -> None:
    env = Calculator()
    await env.reset(Task(id="t", prompt="?", label=5))
    step = await env.step(reply)
    [message] = step.observation
    assert message.role == "tool" and message.content.startswith(told), message.content
    assert (step.reward, step.terminated, step.truncated) == (0.0, False, False)


async def test_an_episode_that_only_calls_tools_is_cut_after_max_turns() -> None:
    env = Calculator(max_turns=2)
    await env.reset(Task(id="t", prompt="?", label=5))
    assert not (await env.step(call("add", a=1, b=1))).truncated
    last = await env.step(call("add", a=1, b=1))
    assert last.truncated and not last.terminated and last.reward == 0.0


def test_tool_env_refuses_duplicate_names_and_a_zero_turn_budget() -> None:
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        Calculator(functions=[add, add])
    with pytest.raises(ValueError, match="max_turns must be at least 1"):
        Calculator(max_turns=0)

    class NoScore(ToolEnv):
        functions = (add,)

    with pytest.raises(TypeError, match="abstract"):
        NoScore()  # type: ignore[abstract]


def test_tools_that_are_not_schemas_are_named_with_the_fix() -> None:
    with pytest.raises(EnvReturnError, match=r"BadTools.tools\[0\] must be a dict") as caught:
        checked_tools(BadTools())
    assert "agenthub.tools.function_schema(f)" in str(caught.value)
    with pytest.raises(CheckEnvError, match=r"after reset\(task 't'\): EnvReturnError: BadTools"):
        check_env(BadTools(), tasks=[Task(id="t", prompt="?")])
