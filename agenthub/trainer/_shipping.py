"""Files between the driver's node and the run's processes on other Ray nodes, through Ray's
object store: nothing assumes a filesystem shared between nodes.

The driver ships what its processes read (`ship`: the model directory, a checkpoint to load).
A process on the driver's node reads the driver's path as it is; one on another node unpacks
the shipped bytes into a node-local directory (`Shipment.here`, `Shipment.opened`). What a
process on another node writes for the run directory (checkpoints, the exported model) it
writes into a node-local directory and returns packed (`Shipment.write_at_origin`); the driver
unpacks it in place (`receive`, `receive_replacing`). On a cluster of one node nothing is
packed or copied.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenthub._errors import AgentHubError

__all__ = ["Shipment", "node_id", "own_vllm_logging", "receive", "receive_replacing", "ship"]

CACHE = Path(tempfile.gettempdir()) / "agenthub-shipped"
"""Where a node keeps what it unpacked for its processes' whole life (the model), by digest."""


def node_id() -> str:
    """The Ray node this process runs on."""
    import ray

    return str(ray.get_runtime_context().get_node_id())


@dataclass(frozen=True)
class Shipment:
    """A file or directory of one node (`origin`, the driver's), readable on any node of the
    cluster. With `origin` None it is a path of whichever node reads it (a process started
    outside a cluster). `parcel` holds its bytes: a reference into the object store as `ship`
    makes it, or the bytes themselves (None when the cluster had one node: no process can be
    elsewhere)."""

    path: str
    origin: str | None = None
    parcel: Any = None
    digest: str = ""

    @staticmethod
    def of(path: str | Path | Shipment) -> Shipment:
        return path if isinstance(path, Shipment) else Shipment(str(path))

    def at_origin(self) -> bool:
        return self.origin is None or self.origin == node_id()

    def here(self) -> Path:
        """The path on this node: the origin's own there, elsewhere a copy unpacked once per
        node and kept."""
        if self.at_origin():
            return Path(self.path)
        name = Path(self.path).name
        kept = CACHE / self.digest
        if not (kept / name).exists():
            CACHE.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f"{self.digest}.", dir=CACHE))
            _unpack(self._bytes(), partial)
            try:
                partial.rename(kept)
            except OSError:  # another process of this node unpacked it first
                shutil.rmtree(partial, ignore_errors=True)
        return kept / name

    @contextmanager
    def opened(self) -> Iterator[Path]:
        """The path on this node while the block runs: the origin's own there, elsewhere a
        copy removed afterwards (a checkpoint to load once)."""
        if self.at_origin():
            yield Path(self.path)
            return
        with tempfile.TemporaryDirectory(prefix="agenthub-") as local:
            _unpack(self._bytes(), Path(local))
            yield Path(local) / Path(self.path).name

    def write_at_origin(self, directory: str, write: Callable[[Path], None]) -> bytes | None:
        """`write(path)` for `directory` of the origin node: at the origin `path` is
        `directory` itself, and nothing is returned; elsewhere a node-local stand-in, returned
        packed for the driver to `receive` (None when `write` wrote nothing)."""
        if self.at_origin():
            write(Path(directory))
            return None
        with tempfile.TemporaryDirectory(prefix="agenthub-") as local:
            stand_in = Path(local) / Path(directory).name
            write(stand_in)
            return _pack(stand_in) if stand_in.exists() else None

    def _bytes(self) -> bytes:
        import ray

        if self.parcel is None:
            raise AgentHubError(
                f"{self.path} is on the driver's node and was not shipped to this one (the Ray "
                "cluster had one node when the run started); start the run once every node "
                "has joined the cluster"
            )
        if isinstance(self.parcel, bytes):  # the bytes themselves, not a reference to them
            return self.parcel
        data: bytes = ray.get(self.parcel)
        return data


def ship(path: Path) -> Shipment:
    """`path` (a file or directory of this, the driver's, node) for the run's processes on
    any node: its bytes put into the object store once, unless the cluster has one node."""
    import ray

    origin = node_id()
    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) < 2:
        return Shipment(str(path), origin)
    data = _pack(path)
    digest = hashlib.sha256(data).hexdigest()[:24]
    return Shipment(str(path), origin, ray.put(data), digest)


def receive(parcel: bytes | None, directory: Path) -> None:
    """Unpack what a process wrote for `directory` on another node (`write_at_origin`) into
    it, beside what it holds (a checkpoint's files from each learner rank)."""
    if parcel is not None:
        _unpack(parcel, directory.parent)


def receive_replacing(parcel: bytes | None, directory: Path) -> None:
    """Put what a process wrote for `directory` on another node in its place, the old one
    removed only once the new one is whole (the exported model)."""
    if parcel is None:
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{directory.name}.", dir=directory.parent) as tmp:
        _unpack(parcel, Path(tmp))
        if directory.exists():
            directory.rename(Path(tmp) / "old")
        (Path(tmp) / directory.name).rename(directory)


def own_vllm_logging() -> None:
    """On another node than the driver's, the vLLM logging configuration the driver wrote
    beside the run's library log is missing, and vLLM refuses to start without it: this node
    writes its own (its library log then lies at the same path on this node). Call it before
    vLLM is imported."""
    from agenthub.trainer._library_logs import LIBRARY_LOG_ENV, library_log_env

    log, config = os.environ.get(LIBRARY_LOG_ENV), os.environ.get("VLLM_LOGGING_CONFIG_PATH")
    if not log or not config or Path(config).exists():
        return
    if Path(config) == Path(log).parent / "vllm-logging.json":  # the driver's, not a user's
        del os.environ["VLLM_LOGGING_CONFIG_PATH"]
        os.environ.update(library_log_env(Path(log)))


def _pack(path: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(path, arcname=path.name)
    return buffer.getvalue()


def _unpack(data: bytes, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(into, filter="data")
