"""JSON schemas for Python functions, in the OpenAI function-calling format chat templates take."""

from __future__ import annotations

import functools
import inspect
import json
import re
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

__all__ = ["arguments_model", "function_schema"]

# A Google-style "Args:" entry: `name: text` or `name (type): text`.
_ARG = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SECTIONS = ("args:", "arguments:", "parameters:", "returns:", "raises:", "yields:", "examples:")


def function_schema(function: Callable[..., Any]) -> dict[str, Any]:
    """The tool schema of `function`: its name, its docstring's text as the description, and
    its parameters as a JSON schema built from the type hints (`Args:` entries of a
    Google-style docstring become the parameters' descriptions).

        def add(a: int, b: int) -> int:
            '''Add two integers.

            Args:
                a: the first one
                b: the second one
            '''
    """
    _check_named(function)
    text = _schema_text(function) if _cacheable(function) else _schema_text.__wrapped__(function)
    schema: dict[str, Any] = json.loads(text)  # a copy callers may change
    return schema


def arguments_model(function: Callable[..., Any]) -> type[BaseModel]:
    """A pydantic model of `function`'s parameters, to validate the arguments of a call.
    `Annotated[int, Field(ge=0, description=...)]` hints keep their constraints."""
    _check_named(function)
    return _model(function) if _cacheable(function) else _model.__wrapped__(function)


# Envs are built once per episode, so each function's model and schema are built only once:
# a pydantic model costs about a millisecond, on the event loop. Bound methods are not kept:
# a method of a per-episode object would keep every such object alive.
def _cacheable(function: Callable[..., Any]) -> bool:
    return inspect.isfunction(function)


@functools.cache
def _schema_text(function: Callable[..., Any]) -> str:
    parameters = arguments_model(function).model_json_schema()
    _drop_titles(parameters)
    description, _ = split_docstring(function)
    schema = {"name": function.__name__, "description": description, "parameters": parameters}
    return json.dumps({"type": "function", "function": schema})


@functools.cache
def _model(function: Callable[..., Any]) -> type[BaseModel]:
    _, described = split_docstring(function)
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except NameError as exc:
        raise TypeError(
            f"the type hints of {function.__name__} do not resolve ({exc}); define the types "
            "they name at module level, where the function's module can see them"
        ) from exc
    fields: dict[str, Any] = {}
    for name, parameter in inspect.signature(function).parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(
                f"{function.__name__} takes *{name}: a tool's parameters must be named, so the "
                "model can be told what to pass"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"{function.__name__}'s parameter {name!r} is positional-only; tools are "
                "called with keyword arguments"
            )
        if name not in hints:
            raise TypeError(
                f"{function.__name__}'s parameter {name!r} has no type hint; annotate it "
                f"({name}: int, say) so the model is told what to pass"
            )
        default = ... if parameter.default is parameter.empty else parameter.default
        info = Field(default, description=described[name]) if name in described else Field(default)
        fields[name] = (hints[name], info)
    return create_model(
        f"{function.__name__}_arguments",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )


def _check_named(function: Callable[..., Any]) -> None:
    if not (inspect.isfunction(function) or inspect.ismethod(function)):
        raise TypeError(
            f"a tool must be a function defined with def (or async def), got "
            f"{type(function).__name__} {function!r}; wrap it in one, named as the model "
            "should call it"
        )
    if function.__name__ == "<lambda>":
        raise TypeError(
            "a tool cannot be a lambda: it has no name for the model to call; define it with def"
        )


def split_docstring(target: Any) -> tuple[str, dict[str, str]]:
    """The description (the docstring up to its first section) and each `Args:` entry's text."""
    lines = (inspect.getdoc(target) or "").splitlines()
    description: list[str] = []
    described: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        head = line.strip().lower()
        if head in _SECTIONS:
            section, current = head, None
            continue
        if section is None:
            description.append(line)
        elif section in _SECTIONS[:3]:
            match = _ARG.match(line)
            if match and not line.startswith((" " * 8, "\t\t")):
                current = match.group(1).lstrip("*")
                described[current] = match.group(2).strip()
            elif current and line.strip():
                described[current] += " " + line.strip()
    return "\n".join(description).strip(), described


def _drop_titles(schema: Any) -> None:
    # pydantic titles every model and field after its name: noise in the model's prompt.
    if isinstance(schema, dict):
        schema.pop("title", None)
        for key, value in schema.items():
            if key in ("properties", "$defs") and isinstance(value, dict):
                for prop in value.values():
                    _drop_titles(prop)
            else:
                _drop_titles(value)
    elif isinstance(schema, list):
        for item in schema:
            _drop_titles(item)
