"""Environment ids -> `EnvSpec`s, from `register` calls and the `agenthub.envs` entry points.

Nothing is imported until an environment is made: entry points are read from package metadata
only, and an environment's module is imported by `make` (or by `load_entry_point`).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import typing
from collections.abc import Callable
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from pydantic import ConfigDict, JsonValue, TypeAdapter, ValidationError

from agenthub._env import Env
from agenthub._errors import (
    AgentHubError,
    EnvArgumentsError,
    EnvBuildError,
    EnvNotFoundError,
    PluginLoadError,
)
from agenthub._returns import method_problems
from agenthub._spec import EnvSpec, WrapperSpec
from agenthub._tracebacks import described, raised_at

_ANY_TYPES = ConfigDict(arbitrary_types_allowed=True)

__all__ = ["ENTRY_POINT_GROUP", "list_envs", "load_entry_point", "make", "register", "spec"]

ENTRY_POINT_GROUP = "agenthub.envs"

_registered: dict[str, EnvSpec] = {}
_discovered: dict[str, EnvSpec] | None = None
_clashes: dict[str, list[str]] = {}  # id -> the packages that all declare it
_json_kwargs = TypeAdapter(dict[str, JsonValue])


def register(
    id: str,
    entry_point: str | Callable[..., Env[Any]],
    *,
    override: bool = False,
    **kwargs: JsonValue,
) -> EnvSpec:
    """Register an environment under `id` in this process.

    `entry_point` is `"package.module:Attr"`, or the `Env` subclass (or function returning an
    env) itself when it is defined at the top level of a module: it is recorded by that import
    path, so the spec stays JSON that other processes rebuild the env from (one defined in a
    script, `__main__`, is found only in that script's process). `kwargs` become the spec's
    defaults. Plugin packages normally declare an entry point in the `agenthub.envs` group
    instead, so they are found without any import; `register` is for scripts, notebooks and
    tests.
    """
    if not override and (taken := _registered.get(id) or _entry_point_specs().get(id)):
        raise ValueError(
            f"environment {id!r} is already registered to {taken.entry_point}"
            + (f" (package {taken.package!r})" if taken.package else "")
            + "; pass override=True to replace it in this process, or choose another id"
        )
    if not isinstance(entry_point, str):
        entry_point = _import_path(entry_point)
    new = EnvSpec(id=id, entry_point=entry_point, kwargs=kwargs)
    _registered[id] = new
    return new


def _import_path(target: object) -> str:
    """`"module:Qualname"` of a class or function that can be imported back by that path."""
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if not callable(target) or not module or not qualname:
        raise TypeError(
            f"register() takes an entry point 'package.module:Attr', an Env subclass or a "
            f"function returning an Env, not {type(target).__name__} object {target!r}"
        )
    if inspect.isclass(target) and not issubclass(target, Env):
        raise TypeError(
            f"{module}.{qualname} is not an agenthub.Env subclass; register an Env subclass or "
            "a function returning an Env"
        )
    if "<locals>" in qualname:
        raise ValueError(
            f"{qualname} is defined inside a function, so nothing can import it: an env is "
            "registered by its import path, which other processes (Ray workers, a resumed run) "
            "rebuild it from. Define it at the top level of a module."
        )
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not target:
        raise ValueError(
            f"{module}:{qualname} does not import back as {target!r} (made at run time, or "
            "its name was rebound?); register a 'package.module:Attr' string that does."
        )
    return f"{module}:{qualname}"


def _entry_point_specs() -> dict[str, EnvSpec]:
    """The entry-point specs, read once. An id that several packages declare keeps the first
    spec and is noted in `_clashes`, so that only asking for that id fails, not every lookup."""
    global _discovered
    if _discovered is None:
        found: dict[str, EnvSpec] = {}
        _clashes.clear()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            package = ep.dist.name if ep.dist is not None else None
            if ep.name in found:
                _clashes.setdefault(ep.name, [str(found[ep.name].package)]).append(str(package))
                continue
            found[ep.name] = EnvSpec(id=ep.name, entry_point=ep.value, package=package)
        _discovered = found
    return _discovered


def _refresh() -> None:
    """Forget discovered entry points (after installing a plugin in a running process)."""
    global _discovered
    _discovered = None


def list_envs() -> list[EnvSpec]:
    """Every known environment, sorted by id; in-process registrations shadow entry points.

    An id that several installed packages declare is listed once; `spec` and `make` refuse it.
    """
    merged = {**_entry_point_specs(), **_registered}
    return [merged[k] for k in sorted(merged)]


def spec(id: str) -> EnvSpec:
    """The `EnvSpec` registered under `id`; an id `"package.module:Attr"` that nothing
    registered names that env class (or function returning an env) directly."""
    if id in _registered:
        return _registered[id]
    found = _entry_point_specs()
    if id in _clashes:
        raise PluginLoadError(
            f"environment id {id!r} is declared by several installed packages "
            f"({', '.join(_clashes[id])}) in the {ENTRY_POINT_GROUP!r} entry-point group; "
            "uninstall one or rename its entry point"
        )
    if id in found:
        return found[id]
    module, _, attr = id.partition(":")
    if module and attr:
        return EnvSpec(id=id, entry_point=id)
    known = ", ".join(s.id for s in list_envs()) or "none"
    raise EnvNotFoundError(
        f"no environment {id!r}; known environments: {known}. Install the plugin package that "
        f"provides it (it must declare an entry point in the {ENTRY_POINT_GROUP!r} group), "
        "call agenthub.register(), or name the class itself as 'package.module:Attr'."
    )


def _describe(spec: EnvSpec) -> str:
    where = f"package {spec.package!r}, " if spec.package else ""
    return f"environment {spec.id!r} ({where}entry point '{spec.id} = {spec.entry_point}')"


def load_entry_point(spec: EnvSpec) -> Callable[..., Any]:
    """Import and return the `Attr` that `spec.entry_point` names."""
    module_name, _, attr_path = spec.entry_point.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise _import_error(spec, module_name, exc) from exc
    try:
        target = _attribute(target, attr_path)
    except Exception as exc:
        raise _not_loaded(spec, module_name, exc) from exc
    if not callable(target):
        raise PluginLoadError(
            f"{_describe(spec)} names {type(target).__name__} object, which is not callable; "
            "it must export an agenthub.Env subclass or a function returning an agenthub.Env."
        )
    return target  # type: ignore[no-any-return]


def _attribute(module: Any, path: str) -> Any:
    """The attribute of `module` at the dotted `path` (`Outer.Inner`) of an entry point."""
    for part in path.split("."):
        module = getattr(module, part)
    return module


def _import_error(spec: EnvSpec, module_name: str, exc: Exception) -> PluginLoadError:
    """The error for `exc`, raised importing the entry point's module. When the code of that
    module (or of one it imports) raised it, it is named at its file and line, where the fix
    is; only a module that is not there is the entry point's or the installation's fault."""
    if isinstance(exc, ModuleNotFoundError) and f"{module_name}.".startswith(f"{exc.name}."):
        return _not_loaded(spec, module_name, exc)  # it, or its package, is not there
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:  # no frame of its own
        where = f"{exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
        return PluginLoadError(f"{_describe(spec)} failed to load: {where}")
    return PluginLoadError(
        f"{_describe(spec)} failed to load: importing {module_name} raised "
        f"{described(exc)}{raised_at(exc)}"
    )


def _not_loaded(spec: EnvSpec, module_name: str, exc: Exception) -> PluginLoadError:
    """The error for an entry point that names no module or attribute there is."""
    if module_name == "__main__":
        return PluginLoadError(
            f"{_describe(spec)} failed to load: {described(exc)}. It was "
            "registered from a script, whose classes only that script's process finds: "
            "move the env into a module this process can import"
        )
    return PluginLoadError(
        f"{_describe(spec)} failed to load: {described(exc)}. The entry point "
        "must name 'module:Attr' where Attr is an agenthub.Env subclass or a function "
        "returning an agenthub.Env; check that the package is installed in this Python."
    )


def make(id: str | EnvSpec, **kwargs: Any) -> Env[Any]:
    """Build the environment registered under `id` (or described by an `EnvSpec`).

    `kwargs` override the spec's defaults. When they are all JSON the returned env's `spec`
    records them, so `make(env.spec)` rebuilds the same environment anywhere; an env made with
    non-JSON arguments (a Python callable, say) has `spec = None`.

    Raises `EnvNotFoundError` for an unknown id, `PluginLoadError` when the entry point does not
    load or give an `Env`, `EnvArgumentsError` when the constructor rejects the arguments, and
    `EnvBuildError` when it fails otherwise; each message names the environment. An env whose
    `reset`, `step` or `aclose` is not `async def`, whose `tasks` is async, or one of whose
    methods cannot take the arguments agenthub passes (`reset` without `seed`) is a
    `PluginLoadError` here, not a failure at its first call.
    """
    base = id if isinstance(id, EnvSpec) else spec(id)
    factory = load_entry_point(base)
    arguments = _check_argument_types(base, factory, {**base.kwargs, **kwargs})
    try:
        env = factory(**arguments)
    except AgentHubError:
        raise
    except (TypeError, ValueError) as exc:
        raise EnvArgumentsError(
            f"{_describe(base)} could not be built with {arguments}: {exc}{_raised_in(exc)}"
        ) from exc
    except Exception as exc:
        raise EnvBuildError(
            f"{_describe(base)} failed to build with {arguments}: {described(exc)}"
        ) from exc
    if not isinstance(env, Env):
        raise PluginLoadError(
            f"{_describe(base)} returned {type(env).__name__}, not an agenthub.Env; the entry "
            "point must name an agenthub.Env subclass or a function returning an agenthub.Env."
        )
    if problems := method_problems(env):
        raise PluginLoadError(f"{_describe(base)}: {'; '.join(problems)}")
    try:
        unwrapped = base.model_copy(update={"wrappers": ()})
        env.spec = unwrapped.with_kwargs(**_json_kwargs.validate_python(kwargs))
    except ValidationError:
        env.spec = None
    for wrapper in base.wrappers:
        env = _wrap(env, base, wrapper)
    return env


def _wrap(env: Env[Any], base: EnvSpec, wrapper: WrapperSpec) -> Env[Any]:
    """`env` in the wrapper `wrapper` records, as `base` lists it."""
    from agenthub.wrappers import Wrapper

    where = f"{_describe(base)} is wrapped in {wrapper.entry_point}"
    module_name, _, attr_path = wrapper.entry_point.partition(":")
    try:
        target = _attribute(importlib.import_module(module_name), attr_path)
    except Exception as exc:
        raise PluginLoadError(
            f"{where}, which failed to load: {described(exc)}. A wrapper must be a "
            "class at the top level of a module this process can import"
        ) from exc
    if not (isinstance(target, type) and issubclass(target, Wrapper)):
        raise PluginLoadError(f"{where}, which is not a subclass of agenthub.wrappers.Wrapper")
    if wrapper.kwargs is None:
        raise EnvBuildError(
            f"{where}, which was built with arguments that are not JSON (a callable, say), so "
            "it cannot be built again from the spec: wrap the env by hand"
        )
    try:
        return target(env, **wrapper.kwargs)
    except (TypeError, ValueError) as exc:
        raise EnvArgumentsError(
            f"{where}, which could not be built with {wrapper.kwargs}: {exc}{_raised_in(exc)}"
        ) from exc
    except Exception as exc:
        raise EnvBuildError(
            f"{where}, which failed to build with {wrapper.kwargs}: {type(exc).__name__}: "
            f"{exc}{raised_at(exc)}"
        ) from exc


def _raised_in(exc: BaseException) -> str:
    """Where in the env's own code `exc` was raised, if it was (not by the call itself, as for
    an unknown keyword): a bug in a constructor then points at its line instead of reading as
    a wrong argument."""
    return raised_at(exc) if exc.__traceback__ and exc.__traceback__.tb_next else ""


def _check_argument_types(
    spec: EnvSpec, factory: Callable[..., Any], arguments: dict[str, Any]
) -> dict[str, Any]:
    """Arguments against the constructor's annotations, so `max_attempts=abc` from a command
    line is named as the wrong argument instead of failing deep inside the env ("'<' not
    supported between instances of 'str' and 'int'"). Lax, as pydantic coerces: only what
    cannot be the annotated type is refused, and a number or text taken as another (`"20"`
    or `1e2` for an `int`) is passed on converted. Returns the arguments to build with."""
    checked = dict(arguments)
    if (accepted := _parameters(factory)) is not None:
        for name in arguments:
            if name not in accepted:
                close = difflib.get_close_matches(name, accepted, n=1)
                maybe = f" (did you mean {close[0]!r}?)" if close else ""
                raise EnvArgumentsError(
                    f"{_describe(spec)} could not be built with {arguments}: unexpected keyword "
                    f"argument {name!r}{maybe}; it takes {', '.join(accepted) or 'no arguments'} "
                    f"(`agenthub envs show {spec.id}` describes them)"
                )
    adapters = _argument_adapters(factory)
    for name, value in arguments.items():
        adapter = adapters.get(name)
        if adapter is None:
            continue
        try:
            converted = adapter.validate_python(value)
        except ValidationError as exc:
            hint = adapter._type
            expected = hint.__name__ if isinstance(hint, type) else str(hint)
            raise EnvArgumentsError(
                f"{_describe(spec)}: argument {name}={value!r} must be {expected}: "
                f"{exc.errors()[0]['msg'].lower()}"
            ) from exc
        scalars = str | int | float | bool
        if isinstance(value, scalars) and isinstance(converted, scalars):
            checked[name] = converted
    return checked


@cache
def _parameters(factory: Callable[..., Any]) -> tuple[str, ...] | None:
    """The keyword arguments `factory` takes; `None` when it takes any (`**kwargs`) or its
    signature cannot be read."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


@cache
def _argument_adapters(factory: Callable[..., Any]) -> dict[str, TypeAdapter[Any]]:
    target = factory.__init__ if isinstance(factory, type) else factory  # type: ignore[misc]
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # annotations that do not resolve: nothing to check against
        return {}
    adapters: dict[str, TypeAdapter[Any]] = {}
    for name, hint in hints.items():
        if name == "return":
            continue
        with contextlib.suppress(Exception):  # a type pydantic cannot check: left to the env
            adapters[name] = TypeAdapter(hint, config=_ANY_TYPES)
    return adapters
