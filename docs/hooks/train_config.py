"""MkDocs hook: the train config reference page, generated at build time from `TrainConfig`.

Every field of the config tree carries a docstring under it; this hook reads them, with each
field's type, default and bounds, so the reference cannot drift from the code. A field without
a docstring fails the build. `TrainConfig` is found by its class statement under `agenthub/`,
wherever in the package it lives.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import re
import sys
import textwrap
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from pydantic import BaseModel, ValidationError

PAGE = "train-config.md"

INTRO = """\
# Train config reference

`agenthub train` is configured by one typed tree. Give only what differs from the defaults, in
sparse TOML files (`--config FILE`, repeatable, applied in order) and dotted `KEY=VALUE`
overrides after them (`learner.lr=3e-4`, `rollout.temperature=0.8`). The env's own arguments go
under `env_kwargs` (`env_kwargs.max_turns=3`). An unknown key or a value of the wrong kind is
refused before anything starts, naming the key. `agenthub train --env ID --print-config` shows
the resolved tree, and the run directory keeps it as `config.json`. See [Train](train.md) for
what a run does with it.

The defaults below are those of a run on the embedded default model, as `--print-config` shows
them; "unset" is a setting left out (its description says what that means).

This page is generated from the config classes' docstrings when the manual is built.
"""


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = Path(config.config_file_path).parent
    content = render(find_train_config(root))
    files.append(File.generated(config, PAGE, content=content))
    return files


def find_train_config(root: Path) -> type[BaseModel]:
    """Import `TrainConfig` from the module under agenthub/ that defines it, taking the code
    beside mkdocs.yml over any installed copy."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    package = root / "agenthub"
    defining = [
        path
        for path in sorted(package.rglob("*.py"))
        if re.search(r"^class TrainConfig\b", path.read_text(encoding="utf-8"), re.MULTILINE)
    ]
    if len(defining) != 1:
        raise PluginError(
            f"train config reference: expected one module under {package} defining "
            f"`class TrainConfig`, found {len(defining)}; update docs/hooks/train_config.py"
        )
    module = ".".join(defining[0].relative_to(root).with_suffix("").parts)
    try:
        found: type[BaseModel] = importlib.import_module(module).TrainConfig
    except ImportError as exc:
        raise PluginError(
            f"train config reference: importing {module} failed ({exc}); the manual is built "
            "from a full install (bash scripts/setup.sh, not --light)"
        ) from exc
    return found


def render(root: type[BaseModel]) -> str:
    """The reference page: the intro, then each section's fields as a definition list (key,
    type, default; the docstring under them), top level first."""
    resolved = _resolved_defaults(root)
    out = [INTRO]
    for key, section, docstring in sections(root):
        title = f"`{key}`" if key else "Top level"
        out += [f"## {title}", ""]
        lead = " ".join(_line(part) for part in (inspect.getdoc(section), docstring) if part)
        if lead:
            out += [lead, ""]
        docs = field_docstrings(section)
        for name, field in section.model_fields.items():
            if _section_of(field.annotation) is not None:
                continue
            if name not in docs:
                raise PluginError(
                    f"train config reference: {section.__name__}.{name} has no docstring; "
                    "write one on the line under the field"
                )
            full = f"{key}.{name}" if key else name
            value = resolved.get(full, field.get_default(call_default_factory=True))
            default = _default(field, value)
            kind = _type(field.annotation, field.metadata)
            out += [f"`{full}` · {kind} · {default}", f":   {_line(docs[name])}", ""]
    return "\n".join(out)


def sections(
    model: type[BaseModel], key: str = "", docstring: str = ""
) -> list[tuple[str, type[BaseModel], str]]:
    """Each section of the tree, depth first: its dotted key, its class, its field's docstring."""
    found = [(key, model, docstring)]
    docs = field_docstrings(model)
    for name, field in model.model_fields.items():
        child = _section_of(field.annotation)
        if child is not None:
            found += sections(child, f"{key}.{name}" if key else name, docs.get(name, ""))
    return found


def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """The string under each annotated field of the class body (PEP 257 attribute docstrings)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(model)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    docs = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def _section_of(annotation: Any) -> type[BaseModel] | None:
    for kind in (annotation, *get_args(annotation)):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
    return None


def _line(text: str) -> str:
    return " ".join(text.split())


_BOUNDS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "length ≥"}


def _type(annotation: Any, metadata: list[Any]) -> str:
    bounds = [
        f"{sign} {getattr(rule, name)}"
        for rule in metadata
        for name, sign in _BOUNDS.items()
        if getattr(rule, name, None) is not None
    ]
    return _type_name(annotation) + (f", {', '.join(bounds)}" if bounds else "")


def _type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(f"`{_toml(arg)}`" for arg in args)
    if origin is Union or origin is types.UnionType:
        named = [_type_name(arg) for arg in args if arg is not type(None)]
        return " or ".join(named) + (" or unset" if type(None) in args else "")
    if origin is tuple or origin is list:
        return f"list of {_type_name(args[0])}s" if args else "list"
    if origin is dict:
        return "table"
    if get_origin(annotation) is not None and hasattr(annotation, "__metadata__"):
        return _type_name(args[0])
    names = {bool: "bool", int: "int", float: "float", str: "string"}
    if annotation in names:
        return names[annotation]
    return str(getattr(annotation, "__name__", annotation))


def _resolved_defaults(root: type[BaseModel]) -> dict[str, Any]:
    """Each dotted key's value in the tree a run gets when given only its required fields
    (validators fill some defaults in, as `learner.lr` from the model)."""
    required = {name: "ID" for name, field in root.model_fields.items() if field.is_required()}
    flat: dict[str, Any] = {}

    def walk(model: BaseModel, prefix: str) -> None:
        for key in type(model).model_fields:
            value = getattr(model, key)
            if isinstance(value, BaseModel):
                walk(value, f"{prefix}{key}.")
            else:
                flat[prefix + key] = value

    try:
        walk(root.model_validate(required), "")
    except ValidationError as exc:
        raise PluginError(
            f"train config reference: {root.__name__} given only {required} does not validate, "
            f"so its defaults cannot be shown ({exc}); update docs/hooks/train_config.py"
        ) from exc
    return flat


def _default(field: Any, value: Any) -> str:
    if field.is_required():
        return "required"
    return "unset by default" if value is None else f"default `{_toml(value)}`"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    return repr(value)
