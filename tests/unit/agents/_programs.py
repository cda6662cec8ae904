"""Agent programs for the agent_program tests: each is `async def (client, task) -> result`."""

from __future__ import annotations

import json
from typing import Any

import anyio

from agenthub import Env, Message, Step, Task

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two whole numbers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


async def react(client: Any, task: Task) -> str:
    """A ReAct loop over OpenAI tool calls: answer each call, stop at a reply without one."""
    messages: list[Any] = [{"role": "user", "content": str(task.prompt)}]
    for _ in range(int(task.metadata.get("turns", 4))):
        reply = await client.chat.completions.create(model="m", messages=messages, tools=[ADD])
        message = reply.choices[0].message
        messages.append(message)
        if not message.tool_calls:
            return str(message.content)
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": str(args["a"] + args["b"])}
            )
    return ""


async def summarising(client: Any, task: Task) -> str:
    """Asks twice in an append-only loop, then restarts from a summary (a rewritten history)."""
    messages: list[Any] = [{"role": "user", "content": f"Task {task.id}: count."}]
    for _ in range(2):
        reply = await client.chat.completions.create(model="m", messages=messages)
        messages += [reply.choices[0].message, {"role": "user", "content": "More."}]
    summary = [{"role": "user", "content": f"Task {task.id}, summarised: go on."}]
    reply = await client.chat.completions.create(model="m", messages=summary)
    return str(reply.choices[0].message.content)


async def texting(client: Any, task: Task) -> str:
    """Text completions, each prompt the previous prompt plus the reply plus more."""
    prompt = f"{task.id}:"
    for _ in range(3):
        reply = await client.completions.create(model="m", prompt=prompt, max_tokens=8)
        prompt += reply.choices[0].text + " and"
    return prompt


async def raising(client: Any, task: Task) -> str:
    hi = [{"role": "user", "content": f"Task {task.id}: hi"}]
    await client.chat.completions.create(model="m", messages=hi)
    raise KeyError("no such tool")


async def dict_result(client: Any, task: Task) -> dict[str, str]:
    """Returns its reply in a dict, which a verifier (grading a reply) refuses."""
    hi = [{"role": "user", "content": f"Task {task.id}: hi"}]
    reply = await client.chat.completions.create(model="m", messages=hi)
    return {"answer": str(reply.choices[0].message.content)}


async def hanging(client: Any, task: Task) -> str:
    await anyio.sleep_forever()
    return ""


async def silent(client: Any, task: Task) -> str:
    return "42"


def length_reward(task: Task, result: Any) -> float:
    return float(len(str(result)) > 0)


async def task_reward(task: Task, result: Any) -> float:
    return 1.0 if str(task.label) in str(result) else 0.0


def not_async(client: Any, task: Task) -> str:
    return ""


class ContainsLabel(Env[list[Message]]):
    """A one-step verifier: reward 1 when the reply holds the task's label."""

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[list[Message], dict]:
        self.label = str(task.label)
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        found = self.label in action
        return Step([], reward=float(found), terminated=True, info={"label_found": found})
