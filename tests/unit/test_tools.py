"""`agenthub.tools`: schemas from Python functions, calls read from reply text, and `ToolEnv`
running them as a multi-turn environment that `check_env` accepts."""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass
from typing import Annotated, Literal

import anyio
import numpy as np
import pytest
from pydantic import BaseModel, Field

from agenthub import CheckEnvError, Message, Task
from agenthub._returns import EnvReturnError, checked_tools
from agenthub.testing import check_env
from agenthub.tools import ToolCall, ToolEnv, arguments_model, function_schema, parse_tool_calls
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


def test_annotated_constraints_reach_the_schema_and_the_checks() -> None:
    def root(x: Annotated[float, Field(ge=0, description="not negative")]) -> float:
        """Square root."""
        return float(x**0.5)

    assert function_schema(root)["function"]["parameters"]["properties"]["x"] == {
        "type": "number",
        "minimum": 0,
        "description": "not negative",
    }


async def test_a_constraint_refuses_the_call_before_the_function_runs() -> None:
    def root(x: Annotated[float, Field(ge=0)]) -> float:
        """Square root."""
        return float(x**0.5)

    class Roots(Calculator):
        functions = (root,)

    env = Roots()
    await env.reset(Task(id="t", prompt="?", label=2))
    [told] = (await env.step(call("root", x=-4))).observation
    assert (
        told.content
        == "error: bad arguments for root: x: Input should be greater than or equal to 0"
    )


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        (functools.partial(add, b=1), "a tool must be a function defined with def .*got partial"),
        (lambda a: a, "a tool cannot be a lambda"),
        (print, "got builtin_function_or_method"),
    ],
)
def test_tools_that_are_not_named_functions_are_refused(tool: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        function_schema(tool)  # type: ignore[arg-type]


def test_a_parameter_without_a_type_hint_is_refused() -> None:
    def lookup(key, default: str = "") -> str:  # type: ignore[no-untyped-def]
        return str(key)

    with pytest.raises(TypeError, match="parameter 'key' has no type hint; annotate it"):
        function_schema(lookup)


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


def test_calls_inside_reasoning_are_not_read_and_ids_are_kept() -> None:
    text = (
        '<think>maybe <tool_call>{"name": "divide", "arguments": {"a": 1, "b": 0}}</tool_call>'
        '</think><tool_call>{"name": "add", "id": "call-7", "arguments": {"a": 1}}</tool_call>'
    )
    assert parse_tool_calls(text) == [ToolCall("add", {"a": 1}, id="call-7")]


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
    assert step.observation == [Message(role="tool", content='{"quotient":0.25}', name="divide")]
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


@dataclass
class Reading:
    celsius: float


def thermometer() -> Reading:
    """A reading."""
    return Reading(np.float32(21.5))  # type: ignore[arg-type]


def samples() -> object:
    """Numbers."""
    return {"values": np.arange(3), "model": Point(x=1, y=2), "missing": float("nan")}


def handle() -> object:
    """Not data."""
    return sys.stdin


def quits() -> int:
    """Leaves."""
    raise SystemExit(3)


def long_text() -> str:
    """A lot."""
    return "x" * 5000


@pytest.mark.parametrize(
    ("function", "told"),
    [
        (thermometer, '{"celsius":21.5}'),
        (samples, '{"values":[0,1,2],"model":{"x":1.0,"y":2.0},"missing":"NaN"}'),
        (handle, "error: handle returned a result that is not JSON: "),
        (quits, "error: quits raised SystemExit: 3"),
        (long_text, "x" * 4000 + "\n[... 1000 more characters cut]"),
    ],
)
async def test_results_are_json_text_and_what_cannot_be_is_told(
    function: object, told: str
) -> None:
    env = Calculator(functions=[function])  # type: ignore[list-item]
    await env.reset(Task(id="t", prompt="?", label=5))
    [message] = (await env.step(call(function.__name__))).observation  # type: ignore[attr-defined]
    assert message.content.startswith(told), message.content
    assert message.content == told or told.startswith("error")


async def test_only_the_tools_offered_in_this_episode_can_be_called() -> None:
    class Narrowing(Calculator):
        async def reset(self, task: Task, *, seed: int | None = None):  # type: ignore[no-untyped-def]
            self.tools = [function_schema(add)]
            return await super().reset(task, seed=seed)

    env = Narrowing()
    await env.reset(Task(id="t", prompt="?", label=5))
    step = await env.step(call("divide", a=1, b=2) + call("add", a=1, b=2).replace(
        '{"name"', '{"id": "c2", "name"'))  # fmt: skip
    assert step.observation == [
        Message(role="tool", content="error: there is no tool named 'divide' (tools: add)",
                name="divide"),
        Message(role="tool", content="3", name="add", tool_call_id="c2"),
    ]  # fmt: skip


async def test_a_model_s_own_call_form_is_read_by_overriding_parse_calls() -> None:
    class BracketCalculator(Calculator):
        """Reads `[TOOL_CALLS] [{"name": ..., "arguments": {...}}]`, Mistral's form."""

        def parse_calls(self, reply: str) -> list[ToolCall]:
            _, marker, calls = reply.partition("[TOOL_CALLS]")
            if not marker:
                return []
            try:
                return [ToolCall(c["name"], c["arguments"]) for c in json.loads(calls)]
            except (ValueError, KeyError, TypeError) as exc:
                return [ToolCall("", error=f"the calls are not a JSON list of calls: {exc}")]

    env = BracketCalculator()
    await env.reset(next(iter(env.tasks())), seed=0)
    step = await env.step('[TOOL_CALLS] [{"name": "add", "arguments": {"a": 2, "b": 3}}]')
    assert step.observation == [Message(role="tool", content="5", name="add")]
    step = await env.step("[TOOL_CALLS] add(2, 3)")
    assert step.observation[0].content.startswith("error: the calls are not a JSON list")
    step = await env.step(call("add", a=2, b=3) + " so 5")  # another form is just text here
    assert (step.reward, step.terminated) == (1.0, True)


async def test_a_parse_calls_that_returns_no_list_of_calls_is_named() -> None:
    class Dicts(Calculator):
        def parse_calls(self, reply: str) -> list[ToolCall]:
            return [{"name": "add"}]  # type: ignore[list-item]

    env = Dicts()
    await env.reset(next(iter(env.tasks())), seed=0)
    with pytest.raises(TypeError, match=r"Dicts.parse_calls returned list .*must return a list"):
        await env.step("anything")
    with pytest.raises(TypeError, match=r"must be a plain `def parse_calls\(self, reply\)`"):

        class Awaited(Calculator):
            async def parse_calls(self, reply: str) -> list[ToolCall]:  # type: ignore[override]
                return []


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


# -- check_env on tool envs -------------------------------------------------------------------

CALLED: list[tuple[str, object]] = []


def plot(points: list[Point], style: Literal["line", "dots"], width: Annotated[int, Field(gt=2)],
         title: str | None = None) -> str:  # fmt: skip
    """Plot points."""
    CALLED.append(("plot", (points, style, width, title)))
    return "ok"


async def stalls() -> str:
    """Blocks the event loop, as a tool that forgot `await` would."""
    import time

    time.sleep(0.6)  # noqa: ASYNC251 - on purpose
    return "done"


def test_check_env_calls_every_tool_with_arguments_from_its_schema() -> None:
    CALLED.clear()
    check_env(Calculator(functions=[plot]))
    assert CALLED and CALLED[0] == ("plot", ([], "line", 3, None))


def test_check_env_catches_a_tool_that_blocks_the_event_loop() -> None:
    with pytest.raises(CheckEnvError, match="blocked the event loop"):
        check_env(Calculator(functions=[stalls]))


def test_schemas_are_built_once_per_function_and_handed_out_as_copies() -> None:
    # Envs are built per episode: the pydantic model is built once, each schema is a copy.
    assert arguments_model(add) is arguments_model(add)
    first = function_schema(add)
    first["function"]["name"] = "changed"
    assert function_schema(add)["function"]["name"] == "add"

    class Store:
        def look(self, key: str) -> str:
            """Look a key up."""
            return key

    # A bound method works too, and its object is not kept alive by a cache.
    assert function_schema(Store().look)["function"]["parameters"]["required"] == ["key"]
    assert arguments_model(Store().look) is not arguments_model(Store().look)


def test_a_subclass_that_skips_tool_env_init_is_told_to_call_it() -> None:
    class OwnInit(ToolEnv):
        functions = (add,)

        def __init__(self, k: int = 1) -> None:
            self.k = k

        async def score(self, task: Task, answer: str) -> float:
            return 0.0

    with pytest.raises(RuntimeError, match=r"OwnInit.__init__ does not call super\(\).__init__"):
        anyio.run(OwnInit().reset, Task(id="t", prompt="?"))
    with pytest.raises(CheckEnvError, match="does not call super"):
        check_env(OwnInit(), tasks=[Task(id="t", prompt="?")])


def test_a_plain_def_score_is_refused_when_the_class_is_defined() -> None:
    with pytest.raises(
        TypeError, match=r"Sync.score must be `async def score\(self, task, answer\)`"
    ):

        class Sync(ToolEnv):
            def score(self, task: Task, answer: str) -> float:  # type: ignore[override]
                return 1.0


@pytest.mark.parametrize(
    ("returned", "reward"), [(True, 1.0), (False, 0.0), (np.float32(0.5), 0.5), (2, 2.0)]
)
async def test_score_may_return_a_bool_or_numpy_number(returned: object, reward: float) -> None:
    class Scored(Calculator):
        async def score(self, task: Task, answer: str) -> float:
            return returned  # type: ignore[return-value]

    env = Scored()
    await env.reset(Task(id="t", prompt="?", label=5))
    step = await env.step("5")
    assert step.reward == reward and type(step.reward) is float


async def test_a_score_that_is_no_number_is_named() -> None:
    class Worded(Calculator):
        async def score(self, task: Task, answer: str) -> float:
            return "right"  # type: ignore[return-value]

    env = Worded()
    await env.reset(Task(id="t", prompt="?", label=5))
    with pytest.raises(
        TypeError, match="Worded.score returned str 'right'; it must return a number"
    ):
        await env.step("5")
