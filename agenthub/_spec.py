"""`EnvSpec`: everything needed to build an environment again, as JSON."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, JsonValue, field_validator

__all__ = ["EnvSpec"]


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

    @field_validator("entry_point")
    @classmethod
    def _check_entry_point(cls, value: str) -> str:
        module, sep, attr = value.partition(":")
        if not (module and sep and attr):
            raise ValueError(
                f"entry_point {value!r} must look like 'package.module:Attr', naming an Env "
                "subclass or a function returning an Env"
            )
        return value

    def with_kwargs(self, **kwargs: JsonValue) -> EnvSpec:
        """A copy whose kwargs are this spec's overridden by `kwargs`."""
        return self.model_copy(update={"kwargs": {**self.kwargs, **kwargs}})
