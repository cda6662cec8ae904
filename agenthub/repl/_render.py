"""How the REPL shows tasks, steps and token sequences."""

from __future__ import annotations

import json
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from agenthub._errors import RewardFuncError, RewardModelError
from agenthub._returns import EnvReturnError
from agenthub._tracebacks import described
from agenthub._types import Observation, Step, Task
from agenthub.agents import ChatTokenizer, Generation, SamplingParams, Trajectory
from agenthub.repl._episode import Episode, TokenKind
from agenthub.repl._input import COMMANDS, ENTRY_HELP

__all__ = [
    "counted",
    "show_failure",
    "show_observation",
    "show_saved",
    "show_settings",
    "show_step",
    "show_task",
    "show_legend",
    "show_token_stream",
    "show_tokens",
    "show_tools",
    "to_json",
]

STYLES: dict[TokenKind, str] = {
    "prompt": "cyan",
    "env": "yellow",
    "model": "bold green",
    "human": "magenta",
}
LEGEND: dict[TokenKind, str] = {
    "prompt": "prompt (mask 0)",
    "env": "env (mask 0)",
    "model": "model-sampled (mask 1, logprob shown)",
    "human": "typed by you (mask 0: the model did not sample it, so it is not trained on)",
}


def show_task(console: Console, task: Task, index: int | None, seeding: str) -> None:
    """The task's header, with `seeding` (how its episode is seeded, e.g. "seed 0") in
    brackets, then its prompt and label."""
    where = f"task {index}" if index is not None else "task"
    console.print(Text(f"── {where}: {task.id}  ({seeding})", style="bold"), markup=False)
    if isinstance(task.prompt, str):
        console.print(Text(task.prompt))
    else:
        for message in task.prompt:
            _message(console, message.role, message.content, message.name)
    if task.label is not None:
        console.print(Text(f"label: {json.dumps(task.label)[:400]}", style="dim"))


def show_observation(console: Console, observation: Observation) -> None:
    if isinstance(observation, str):
        if observation:
            console.print(Text("observation (text):", style="bold"))
            console.print(Text(observation), markup=False)
        return
    for message in observation:
        _message(console, message.role, message.content, message.name)


def _message(console: Console, role: str, content: str, name: str | None = None) -> None:
    line = Text(f"[{role}{' ' + name if name else ''}] ", style="bold blue")
    line.append(content)
    console.print(line)


def show_system_prompt(console: Console, task: Task, system_prompt: str | None) -> None:
    """The env's system prompt, where it leads the task's prompt (which has none of its own)."""
    if system_prompt is None or task.messages(system_prompt) == task.messages():
        return
    console.print(Text("the env's system prompt, placed before the task's:", style="bold"))
    _message(console, "system", system_prompt)


def show_tools(console: Console, tools: Sequence[Mapping[str, Any]]) -> None:
    """The functions the env offers the model: name, parameters and the description's first
    line (the chat template shows the model all of it)."""
    if not tools:
        return
    console.print(
        Text(f"tools ({len(tools)}), shown to the model by the chat template:", style="bold")
    )
    for tool in tools:
        function = tool["function"]
        parameters = function.get("parameters") or {}
        names = ", ".join(parameters.get("properties", {})) if isinstance(parameters, dict) else ""
        line = Text(f"  {function['name']}({names})", style="cyan")
        description = str(function.get("description") or "").strip().splitlines()
        if description:
            line.append(f"  {description[0]}", style="dim")
        console.print(line, markup=False)


def show_step(console: Console, number: int, step: Step[Any], total: float, seconds: float) -> None:
    head = Text(f"── step {number}: ", style="bold")
    head.append(f"reward {step.reward:g}  return {total:g}  ")
    head.append(f"terminated {step.terminated}  truncated {step.truncated}")
    if step.score is not None:
        head.append(f"  score {step.score:g}")
    head.append(f"  (step {seconds:.3f} s)", style="dim")
    console.print(head)
    if step.info:
        console.print(Text(f"info: {to_json(step.info)}", style="dim"), markup=False)
    if step.extra_logs:
        console.print(Text(f"extra_logs: {to_json(step.extra_logs)}", style="dim"))
    show_observation(console, step.observation)
    if step.done:
        console.print(
            Text("episode over: :save FILE, :undo, :reset or :quit", style="bold"), markup=False
        )


def show_failure(
    console: Console, what: str, exc: BaseException, *, cause: str | None = None
) -> None:
    """An exception with its traceback, typed as the episode runner would record it (by
    default as an env's failure)."""
    if cause is None:
        scoring = isinstance(exc, RewardFuncError | RewardModelError)
        cause = "score_error" if scoring else "env_error"
    if isinstance(exc, EnvReturnError):
        # The env returned the wrong thing: the traceback would point at agenthub's code.
        console.print(Text(f"{cause}: {exc}", style="bold red"), markup=False)
        return
    console.print(
        Text(f"{cause}: {what} raised {described(exc)}", style="bold red"),
        markup=False,
    )
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    console.print(Text(trace, style="red"), markup=False, highlight=False)


def to_json(value: Mapping[str, Any]) -> str:
    return json.dumps(dict(value), default=repr, ensure_ascii=False)[:2000]


def show_help(console: Console) -> None:
    console.print(Text(ENTRY_HELP))
    for line in COMMANDS.values():
        console.print(Text(line))
    console.print(
        Text(
            "Typed actions enter the token sequence as if the model had written them "
            "(text + end-of-turn token) with loss mask 0; :tokens shows them in magenta."
        )
    )


def show_generation(console: Console, generation: Generation, text: str, seconds: float) -> None:
    head = (
        f"model ({len(generation.token_ids)} tokens, {generation.finish_reason}, "
        f"generate {seconds:.3f} s):"
    )
    console.print(Text(head, style="bold green"))
    console.print(Text(text), markup=False)


def counted(n: int, what: str) -> str:
    """`n` and `what`, plural unless `n` is 1: "1 call", "3 calls"."""
    return f"{n} {what}{'s' * (n != 1)}"


def show_saved(
    console: Console, path: Path, line: int, trajectory: Trajectory, turn: str = "step"
) -> None:
    """What `:save` wrote: where, and the trajectory's size and return."""
    console.print(
        Text(
            f"saved line {line} of {path}: {len(trajectory.tokens)} tokens, "
            f"{counted(trajectory.num_turns, turn)}, return {trajectory.reward:g}",
            style="bold",
        ),
        markup=False,
    )


def show_undone(console: Console, fresh: Episode, steps: int, seconds: float, same: bool) -> None:
    """What `:undo` did: the episode played again to `steps` actions from its seed, and a
    warning when the env answered the replay differently (`same` is False)."""
    console.print(
        Text(
            f"undone: back at step {steps} (replayed {steps} actions from seed "
            f"{fresh.seed} in {seconds:.3f} s)",
            style="bold",
        )
    )
    if not same:
        console.print(
            Text(
                "warning: the env answered differently on the replay; it is not "
                f"deterministic under seed {fresh.seed}",
                style="bold yellow",
            )
        )
    show_observation(
        console, fresh.steps[-1].observation if fresh.steps else fresh.first_observation
    )


def show_settings(console: Console, sampling: SamplingParams) -> None:
    seed = "none" if sampling.seed is None else sampling.seed
    console.print(
        Text(
            f"sampling: temperature {sampling.temperature:g}  top_p {sampling.top_p:g}  "
            f"top_k {sampling.top_k}  max_tokens {sampling.max_tokens}  seed {seed}",
            style="dim",
        )
    )


def show_tokens(
    console: Console, episode: Episode, chat: ChatTokenizer, *, ids: bool = False
) -> None:
    """Every token of the episode in its kind's colour, each boxed by `|`, with the rollout
    logprob after each sampled token."""
    session = episode.session
    show_legend(console, episode.kinds, LEGEND)
    show_token_stream(
        console, chat, session.tokens, session.loss_mask, session.logprobs, episode.kinds, ids
    )


def show_legend(
    console: Console, kinds: Sequence[TokenKind], legend: Mapping[TokenKind, str]
) -> None:
    """How many tokens there are of each kind in `legend`, each in its colour."""
    line = Text(f"{len(kinds)} tokens: ")
    for kind, what in legend.items():
        line.append(f"{kinds.count(kind)} {what}", style=STYLES[kind])
        line.append("  ")
    console.print(line)


def show_token_stream(
    console: Console,
    chat: ChatTokenizer,
    tokens: Sequence[int],
    loss_mask: Sequence[int],
    logprobs: Sequence[float],
    kinds: Sequence[TokenKind],
    ids: bool,
) -> None:
    text = Text()
    for i, token in enumerate(tokens):
        piece = _visible(_token_text(chat, token))
        text.append("|", style="dim")
        text.append(piece, style=STYLES[kinds[i]])
        if ids:
            text.append(f"#{token}", style="dim")
        if loss_mask[i] == 1:
            text.append(f"({logprobs[i]:.2f})", style="dim green")
        if piece.endswith("↵"):
            text.append("\n")
    console.print(text, soft_wrap=False, overflow="fold")


def _token_text(chat: ChatTokenizer, token: int) -> str:
    text = chat.tokenizer.decode([token], skip_special_tokens=False)
    assert isinstance(text, str)
    return text


def _visible(piece: str) -> str:
    return piece.replace("\n", "↵").replace("\t", "→")
