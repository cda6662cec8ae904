"""`EnvSpec`: everything needed to build an environment again, as JSON."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, JsonValue, field_validator

__all__ = ["EnvSpec", "WrapperSpec"]


def _check_entry_point(value: str, naming: str) -> str:
    module, sep, attr = value.partition(":")
    if not (module and sep and attr):
        raise ValueError(
            f"entry_point {value!r} must look like 'package.module:Attr', naming {naming}"
        )
    return value


class WrapperSpec(BaseModel):
    """One wrapper around an environment, as `agenthub.make` applies it again: its class and
    the arguments it was given besides the env."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entry_point: str
    """`"package.module:Class"`, a subclass of `agenthub.wrappers.Wrapper`."""
    kwargs: dict[str, JsonValue] | None = {}
    """Its arguments besides the env; None when they are not all JSON (a callable, say), and
    the wrapper cannot be built again from the spec."""

    @field_validator("entry_point")
    @classmethod
    def _valid_entry_point(cls, value: str) -> str:
        return _check_entry_point(value, "a subclass of agenthub.wrappers.Wrapper")


class EnvSpec(BaseModel):
    """A registered environment: its id, where its code lives and its default arguments.

    Frozen, and round-trips through JSON (`model_dump_json` / `model_validate_json`), so a Ray
    worker or a saved run can rebuild exactly the environment that was used.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    entry_point: str
    """`"package.module:Attr"` where `Attr` is an `Env` subclass or a callable returning one."""
    kwargs: dict[str, JsonValue] = {}
    """Keyword arguments passed to `Attr`; `make(id, **kw)` overrides them one by one."""
    package: str | None = None
    """The distribution that provides the environment, when it came from an entry point."""
    wrappers: tuple[WrapperSpec, ...] = ()
    """Wrappers around the environment, innermost first: `make` applies them in this order."""

    @field_validator("entry_point")
    @classmethod
    def _valid_entry_point(cls, value: str) -> str:
        return _check_entry_point(value, "an Env subclass or a function returning an Env")

    def with_kwargs(self, **kwargs: JsonValue) -> EnvSpec:
        """A copy whose kwargs are this spec's overridden by `kwargs`."""
        return self.model_copy(update={"kwargs": {**self.kwargs, **kwargs}})
