"""Build the default model into a directory, and keep built ones in a cache.

A build writes into a temporary sibling directory and renames it into place only when complete,
so a crash or interruption never leaves a half-built model where a reader would find it; builders
of the same model in other processes wait on a lock file and then reuse the result.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from agenthub._errors import AgentHubError
from agenthub.agents.default_model._config import BUILDER_VERSION, DefaultModelConfig
from agenthub.agents.default_model._demos import Demonstration, collect_demonstrations, digest
from agenthub.agents.default_model._progress import BuildProgress, SilentBuildProgress

__all__ = [
    "MANIFEST",
    "build_default_model",
    "default_cache_dir",
    "default_model_key",
    "ensure_default_model",
]

MANIFEST = "agenthub_model.json"
"""Written last into a built model directory: what it was built from and how training went."""


def default_cache_dir() -> Path:
    """Where built models are kept: `$AGENTHUB_CACHE_DIR/models`, else
    `$XDG_CACHE_HOME/agenthub/models`, else `~/.cache/agenthub/models`."""
    if root := os.environ.get("AGENTHUB_CACHE_DIR"):
        return Path(root) / "models"
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "agenthub" / "models"


def default_model_key(config: DefaultModelConfig, demos: Sequence[Demonstration]) -> str:
    """The cache key: a hash of the builder version, the config and the demonstrations."""
    inputs = {"builder": BUILDER_VERSION, "config": config.model_dump(), "demos": digest(demos)}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def ensure_default_model(
    cache_dir: Path | None = None,
    config: DefaultModelConfig | None = None,
    *,
    progress: BuildProgress | None = None,
    force: bool = False,
) -> Path:
    """The directory of the default model (Hugging Face format: config.json, safetensors weights,
    tokenizer files with a chat template), built on first use and cached under `cache_dir`
    (default: `default_cache_dir()`) as `default-<key>`. Safe to call from several processes at
    once: one builds, the others wait for it. `force` rebuilds a cached model."""
    config = config or DefaultModelConfig()
    progress = progress or SilentBuildProgress()
    cache_dir = cache_dir or default_cache_dir()
    demos = _demonstrations(config)  # under a second; the cache key hashes them
    target = cache_dir / f"default-{default_model_key(config, demos)}"
    if not force and (target / MANIFEST).is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(cache_dir / f".{target.name}.lock"):
        if force or not (target / MANIFEST).is_file():
            # Holding the lock, any staging directory of this model is a dead builder's leftover.
            for stale in cache_dir.glob(f".{target.name}.building-*"):
                shutil.rmtree(stale)
            _build_atomically(target, config, demos, progress, replace=True)
    return target


def build_default_model(
    out_dir: Path,
    config: DefaultModelConfig | None = None,
    *,
    progress: BuildProgress | None = None,
    force: bool = False,
) -> Path:
    """Build the default model into `out_dir`, which must not exist unless `force` is given
    (then it is replaced once the new model is complete)."""
    config = config or DefaultModelConfig()
    progress = progress or SilentBuildProgress()
    if out_dir.exists() and not force:
        raise AgentHubError(f"{out_dir} already exists; pass --force to replace it")
    demos = _demonstrations(config)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _build_atomically(out_dir, config, demos, progress, replace=force)
    return out_dir


def _demonstrations(config: DefaultModelConfig) -> list[Demonstration]:
    return collect_demonstrations(
        config.env_ids,
        config.demos_per_env,
        mistake_share=config.mistake_share,
        seed=config.seed,
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_atomically(
    target: Path,
    config: DefaultModelConfig,
    demos: Sequence[Demonstration],
    progress: BuildProgress,
    *,
    replace: bool,
) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
    try:
        _build_into(staging, config, demos, progress)
        if replace and target.exists():
            # rename() cannot replace a non-empty directory: move the old one aside first.
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            target.rename(old / "model")
            staging.rename(target)
            shutil.rmtree(old)
        else:
            staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    # Float sums depend on how work is split over threads, so a fixed count keeps the weights
    # the same wherever they are built; and on a busy machine one thread wastes no time
    # spinning: measured 0.55 s CPU per step against 2-4 s with two threads on a loaded box.
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _build_into(
    out_dir: Path,
    config: DefaultModelConfig,
    demos: Sequence[Demonstration],
    progress: BuildProgress,
) -> None:
    from agenthub.agents.default_model._tokenizer import train_tokenizer
    from agenthub.agents.default_model._warm_start import (
        encode_demonstrations,
        new_model,
        supervised_warm_start,
    )

    progress.phase("training the tokenizer")
    texts = [m.content for d in demos for m in d.messages] + [d.response for d in demos]
    tokenizer = train_tokenizer(texts, config.vocab_size, out_dir)
    progress.phase("encoding demonstrations")
    encoded = encode_demonstrations(demos, tokenizer, config.max_demo_tokens)
    if not encoded:
        raise AgentHubError(
            f"every demonstration is longer than max_demo_tokens={config.max_demo_tokens}"
        )
    with _torch_threads(1):
        model = new_model(config, tokenizer)
        progress.phase("warm start (supervised)", total=config.sft_steps)
        losses = supervised_warm_start(
            model, encoded, config, lambda _step, loss: progress.advance(loss)
        )
    progress.phase("saving")
    model.save_pretrained(out_dir, safe_serialization=True)
    manifest = {
        "builder_version": BUILDER_VERSION,
        "key": default_model_key(config, demos),
        "config": config.model_dump(),
        "demonstrations": {
            "digest": digest(demos),
            "used": len(encoded),
            "by_env": {e: sum(d.env_id == e for d in demos) for e in config.env_ids},
        },
        "parameters": sum(p.numel() for p in model.parameters()),
        "sft_loss": {"first": losses[0], "last": losses[-1]} if losses else None,
    }
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
