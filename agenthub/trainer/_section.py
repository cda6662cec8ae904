"""The base of every `agenthub train` config section: frozen, no unknown keys, and no
true/false where a number is meant."""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

__all__ = ["ConfigSection"]


class ConfigSection(BaseModel):
    """A config section. Pydantic reads `true` as 1 for a number field, so a slip such as
    `rollout.temperature=true` would train at temperature 1.0 without a word; it is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field and _takes_a_number_not_a_bool(field.annotation):
            raise ValueError(f"takes a number, not {str(value).lower()}")
        return value


def _accepted(annotation: Any) -> set[Any]:
    """The plain types (and literal values' types) a field annotation admits."""
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        return set().union(*(_accepted(arg) for arg in get_args(annotation)))
    if origin is Literal:
        return {type(arg) for arg in get_args(annotation)}
    return {origin or annotation}


def _takes_a_number_not_a_bool(annotation: Any) -> bool:
    accepted = _accepted(annotation)
    return bool not in accepted and bool(accepted & {int, float})
