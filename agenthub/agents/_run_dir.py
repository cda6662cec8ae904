"""The files of a run directory, for eval and train alike: the lock that keeps a second run out,
writes that a crash cannot leave half done, JSONL logs repaired after one, the check that a
resumed run is the run the directory holds, and reading the tasks a run is given.

What each command keeps there (eval's `eval.json` and `trajectories.jsonl`, train's config,
metrics and checkpoints) is the command's; how the files are written and checked is here.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import logging
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict

from agenthub._errors import AgentHubError, NoTaskSourceError
from agenthub._registry import make
from agenthub._returns import checked_tasks
from agenthub._tracebacks import raised
from agenthub._types import Task

if TYPE_CHECKING:
    from agenthub.agents._evaluate import EvalConfig

__all__ = [
    "EvalIdentity",
    "append_jsonl",
    "changed_fields",
    "jsonl_lines",
    "load_tasks",
    "locked",
    "read_jsonl",
    "split_tasks",
    "write_atomic",
    "writable",
]

_logger = logging.getLogger("agenthub")

M = TypeVar("M", bound=BaseModel)


@contextmanager
def locked(path: Path, *, command: str) -> Iterator[None]:
    """Hold the run directory `path` (created if missing) for one run of `agenthub COMMAND`: a
    second run on it (a resume while the first still runs) would interleave both runs' files.
    The lock is the directory's own (flock), so no file is left behind and a killed run holds
    none. A directory this run created and left empty is removed again."""
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise AgentHubError(
            f"cannot create the run directory {path} ({exc.strerror}); choose another --out"
        ) from None
    held = False
    try:
        if not os.access(path, os.W_OK):
            raise AgentHubError(f"cannot write to {path}; choose another --out")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = True
        except BlockingIOError:
            raise AgentHubError(
                f"{path} is in use by another agenthub {command} run; wait for it to end "
                "(or stop it), or choose another --out"
            ) from None
        except OSError as exc:  # NFS refuses flock on a directory; Lustre, FUSE may too
            _logger.warning(
                "agenthub %s: cannot lock %s (%s); nothing stops a second run there",
                command,
                path,
                exc.strerror,
            )
        yield
    finally:
        # Only the run that made the directory and held it removes it, and while it holds
        # it: a refused run must not remove the directory of the run that refused it.
        if created and held and not any(path.iterdir()):
            path.rmdir()  # a run stopped before it wrote anything leaves nothing
        os.close(fd)


@contextmanager
def writable(path: Path, *, flag: str = "--out") -> Iterator[None]:
    """A run directory that cannot be written (read-only, full, a file in its path) is the
    user's to fix: say so in one line, not with the OS's traceback."""
    try:
        yield
    except OSError as exc:
        raise AgentHubError(
            f"cannot write to {flag} {path}: {exc.strerror or exc}; choose another {flag}, a "
            "directory you can write to"
        ) from exc


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` at once: a reader, or a run resumed after a crash, sees the
    old file or the new one, never a part."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def jsonl_lines(path: Path, *, repair: bool = False) -> list[str]:
    """Every complete line of `path` (none when it does not exist). With `repair`, a last line
    cut off by a crash is removed from the file, so it can be appended to again."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    complete, _, tail = raw.rpartition(b"\n")
    if tail and repair:
        path.write_bytes(complete + b"\n" if complete else b"")
    lines = complete.decode("utf-8").splitlines() if complete else []
    return [line for line in lines if line.strip()]


def read_jsonl(path: Path, model: type[M], *, repair: bool = False) -> list[M]:
    """Every complete line of `path` as a `model` (see `jsonl_lines`)."""
    return [model.model_validate_json(line) for line in jsonl_lines(path, repair=repair)]


def append_jsonl(path: Path, records: Sequence[BaseModel | Mapping[str, Any]]) -> None:
    """Append one JSON line per record (a model, or a plain mapping such as a metrics row) to
    `path`, created if missing, and flush it."""
    with path.open("a", encoding="utf-8") as sink:
        sink.writelines(
            (r.model_dump_json() if isinstance(r, BaseModel) else json.dumps(r)) + "\n"
            for r in records
        )


def changed_fields(recorded: M, identity: M, *, assumed: Sequence[str] = ()) -> list[str]:
    """The fields in which `recorded` (an earlier run's identity, read back) and `identity` (the
    run asked for now) differ. A field the earlier run did not record is not compared, unless
    it is `assumed`: its default is what runs before it existed did."""
    compared = [
        name
        for name in type(identity).model_fields
        if name in recorded.model_fields_set or name in assumed
    ]
    return [name for name in compared if getattr(recorded, name) != getattr(identity, name)]


class EvalIdentity(BaseModel):
    """What makes two eval runs the same run (`eval.json`): a resumed run must agree on all of
    these (the model and how it is sampled too, or a second model's run would report the first
    one's episodes). A run written before a field existed is compared on it only when it is
    `ASSUMED` (its default is what such runs did); otherwise it was not recorded."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    ASSUMED: ClassVar[tuple[str, ...]] = ("chat_template", "stop", "top_p")

    env: str
    env_kwargs: dict[str, Any] = {}
    tasks: str | None = None  # the task file's absolute path; None: the env's split
    split: str = "held_out"
    k: int = 1
    chat_template: bool = True
    model: str | None = None  # "default", or the model directory's absolute path
    base_url: str | None = None
    temperature: float | None = None
    top_p: float = 1.0
    seed: int | None = None
    max_reply_tokens: int | None = None
    max_tokens: int | None = None
    max_turns: int | None = None
    stop: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: EvalConfig) -> EvalIdentity:
        model = config.model
        return cls(
            env=config.env,
            env_kwargs=config.env_kwargs,
            tasks=str(Path(config.tasks_file).resolve()) if config.tasks_file else None,
            split=config.split,
            k=config.samples_per_task,
            chat_template=config.chat_template,
            model="default" if model in (None, "default") else str(Path(model).resolve()),
            base_url=config.base_url,
            temperature=config.temperature,
            top_p=config.top_p,
            seed=config.seed,
            max_reply_tokens=config.max_reply_tokens,
            max_tokens=config.max_tokens,
            max_turns=config.max_turns,
            stop=config.stop,
        )


def load_tasks(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    *,
    tasks_file: str | None,
    split: str,
    limit: int | None,
) -> list[Task]:
    """The first `limit` tasks (all: None) of `tasks_file` (read with the field names the env
    was given), else of the env's `split`. `AgentHubError` for none, for repeated ids (a run is
    resumed by task id) and for an env whose task source fails."""
    from agenthub.envs._tasks import read_task_file

    env = make(env_id, **env_kwargs)  # also checks its arguments at once
    try:
        if tasks_file:
            selected = list(itertools.islice(read_task_file(tasks_file, env_kwargs), limit))
        else:
            # A procedural task source may be endless: take only what is asked for.
            selected = list(itertools.islice(checked_tasks(split_tasks(env, split)), limit))
    finally:
        anyio.run(env.aclose)
    ids = Counter(t.id for t in selected)
    if duplicated := [i for i, c in ids.items() if c > 1]:
        raise AgentHubError(f"task ids must be unique to resume a run; repeated: {duplicated[:5]}")
    if not selected:
        raise AgentHubError("no tasks to evaluate")
    return selected


def split_tasks(env: Any, split: str) -> Iterator[Task]:
    """The env's tasks of `split`; its failure, which is the env's bug or a split it lacks,
    said in a line that names where it happened and what to give instead."""
    try:
        yield from env.tasks(split)
    except NoTaskSourceError as exc:
        other = "train" if split != "train" else "held_out"
        raise AgentHubError(
            f"{str(exc).rstrip('.')}. Give tasks with --tasks FILE, or evaluate another split "
            f"(--split {other})"
        ) from exc
    except AgentHubError:
        raise
    except Exception as exc:
        raise AgentHubError(raised(f"the env's tasks({split!r})", exc)) from exc
