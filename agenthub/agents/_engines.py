"""Where a model comes from and how an engine is started for it: `resolve_model` (a directory,
or the embedded default, built on first use), `open_engine` (vLLM in this process, or an
OpenAI-compatible server), `interruptible_start` (vLLM's start-up under Ctrl-C and SIGTERM) and
`rollout_config`, the one place a run's settings become the `RolloutConfig` its episodes get.

`agenthub eval`, `agenthub repl` and the trainer's rollout workers all start engines through
here, so a model directory is checked, and an episode sampled, the same way by each.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agenthub._errors import AgentHubError
from agenthub.agents._chat import ChatTokenizer
from agenthub.agents._config import RolloutConfig, Timeouts
from agenthub.agents._engine import InferenceEngine, SamplingParams

if TYPE_CHECKING:
    from agenthub.agents.default_model import BuildProgress

__all__ = [
    "EpisodeSettings",
    "interruptible_start",
    "open_engine",
    "resolve_model",
    "rollout_config",
]


class EpisodeSettings(Protocol):
    """How each episode of a run is sampled and bounded: what `agenthub.agents.EvalConfig` and
    the trainer's `rollout` section both say, under the same names."""

    @property
    def max_reply_tokens(self) -> int: ...
    @property
    def temperature(self) -> float: ...
    @property
    def top_p(self) -> float: ...
    @property
    def stop(self) -> tuple[str, ...]: ...
    @property
    def max_turns(self) -> int | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def chat_template(self) -> bool: ...
    @property
    def generate_timeout_s(self) -> float: ...
    @property
    def env_step_timeout_s(self) -> float: ...


def rollout_config(
    settings: EpisodeSettings,
    *,
    samples: int,
    concurrency: int,
    seed: int | None,
    sampling_seed: int | None,
) -> RolloutConfig:
    """The `RolloutConfig` of `settings`: `samples` episodes per task, `concurrency` in flight,
    env resets seeded from `seed` and each request's sampling seed derived from
    `sampling_seed` (`None`: unseeded)."""
    return RolloutConfig(
        sampling=SamplingParams(
            max_tokens=settings.max_reply_tokens,
            temperature=settings.temperature,
            top_p=settings.top_p,
            seed=sampling_seed,
            stop=tuple(settings.stop),
        ),
        max_turns=settings.max_turns,
        max_tokens=settings.max_tokens,
        concurrency=concurrency,
        n_samples_per_prompt=samples,
        seed=seed,
        chat_template=settings.chat_template,
        timeouts=Timeouts(
            generate_s=settings.generate_timeout_s, env_step_s=settings.env_step_timeout_s
        ),
    )


async def open_engine(
    model: str | None, *, base_url: str | None, seed: int, concurrency: int
) -> tuple[ChatTokenizer, InferenceEngine]:
    """The tokenizer and a started engine for `model` (see `resolve_model`): vLLM in this
    process, or the OpenAI-compatible server at `base_url`, for which `model` only provides
    the tokenizer. The caller closes the engine (`aclose`)."""
    path = resolve_model(model, needed=base_url is None)
    if base_url is not None:
        from agenthub.agents._openai import OpenAIEngine

        if path is None:
            raise AgentHubError(
                "--base-url needs the model's tokenizer: pass --model PATH (a local copy of the "
                "served model's tokenizer) or --model default"
            )
        chat = ChatTokenizer.from_pretrained(path)
        # A token id the model lacks (another model served) fails its episode, not the run.
        engine = await OpenAIEngine.connect(
            base_url, vocab_size=_vocab_size(path, len(chat.tokenizer))
        )
        return chat, engine
    from agenthub.agents import VLLMEngine

    # vLLM's start-up and shutdown log would bury the progress bar, as in the REPL and the
    # trainer's workers; VLLM_LOGGING_LEVEL=INFO brings it back.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    assert path is not None
    chat = ChatTokenizer.from_pretrained(path)
    with interruptible_start():
        vllm = VLLMEngine(path, seed=seed, max_num_seqs=max(1, concurrency))
    return chat, vllm


def _vocab_size(model: Path, tokens: int) -> int:
    """Ids the served model can sample: its tokenizer's `tokens`, or its embedding's rows when
    its config.json says (padded past the tokenizer: Qwen2.5 has 151,665 tokens, 151,936 rows)."""
    try:
        rows = json.loads((model / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return tokens
    return max(tokens, rows) if isinstance(rows, int) else tokens


@contextmanager
def interruptible_start(
    *,
    quitting: str = "nothing more was evaluated, and running the same command again starts it over",
    forgive: Callable[[], None] | None = None,
) -> Iterator[None]:
    """vLLM's start-up holds this thread, and the event loop that answers SIGTERM, for up to a
    minute, while its engine core, a child in the terminal's process group, gets a Ctrl-C too
    and dies. vLLM swallows the KeyboardInterrupt inside its start-up handshake and waits out
    its 10-minute timeout for the dead core (or fails with its own traceback). Meanwhile a
    Ctrl-C or SIGTERM ends the process at once, its children with it, saying `quitting`; a
    thread of its own catches a signal the handshake would not wake for, and no
    KeyboardInterrupt is ever raised into vLLM.

    `forgive`, where given, is called (from that thread) for the first Ctrl-C instead: the
    caller goes on once the engine is up (`agenthub repl`, whose engine core is out of the
    terminal's reach); a second one ends the process."""
    heard, told = os.pipe()
    os.set_blocking(told, False)
    done = threading.Event()
    forgiven = forgive is None  # the one Ctrl-C forgiven has come

    def watch() -> None:
        nonlocal forgiven
        while not done.is_set():
            if not select.select([heard], [], [], 0.1)[0]:
                continue
            for signum in os.read(heard, 64):
                if done.is_set():
                    return
                if signum == signal.SIGINT and not forgiven and forgive is not None:
                    forgiven = True
                    forgive()
                else:
                    _quit_now(quitting)

    # The handlers do nothing themselves: the thread reads which signal came from the wakeup
    # file descriptor, in order.
    previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in _STOPS}
    wakeup = signal.set_wakeup_fd(told)
    watcher = threading.Thread(target=watch, name="agenthub-start-signals", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        watcher.join()
        os.close(heard)
        os.close(told)


_STOPS = (signal.SIGINT, signal.SIGTERM)


def _quit_now(quitting: str) -> None:
    """End this process and its children at once, saying `quitting`."""
    import psutil  # type: ignore[import-untyped]

    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.kill()
    print(
        f"agenthub: interrupted while the engine started; {quitting}", file=sys.stderr, flush=True
    )
    os._exit(130)


def resolve_model(
    model: str | None, *, needed: bool, progress: BuildProgress | None = None
) -> Path | None:
    """`--model`: a directory, or `default` (also when nothing is given and a model is needed).
    The default model is built on first use (minutes), its phases shown on `progress`, or on a
    display of their own that goes when it is done."""
    if model is None and not needed:
        return None
    if model is None or model == "default":
        try:
            from agenthub.agents.default_model import (  # type: ignore[import-not-found,unused-ignore]
                RichBuildProgress,
                ensure_default_model,
            )
        except ImportError as exc:
            raise AgentHubError(
                "the embedded default model is not part of this agenthub build yet; pass "
                "--model PATH (a local Hugging Face model directory) or --base-url URL"
            ) from exc
        if progress is not None:
            return ensure_default_model(progress=progress)
        with RichBuildProgress(transient=True) as shown:
            return ensure_default_model(progress=shown)
    path = Path(model)
    config = path / "config.json"
    if (path / "checkpoints").is_dir() and (path / "model").is_dir():
        raise AgentHubError(
            f"--model {model}: that is a training run; its policy at the last checkpoint is "
            f"--model {path / 'model'}"
        )
    if not config.is_file():
        raise AgentHubError(
            f"--model {model}: no config.json there; give a local Hugging Face model directory "
            "or 'default'"
        )
    try:
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (ValueError, AttributeError):
        model_type = None
    has_tokenizer = any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    if not model_type or not has_tokenizer:
        lacks = "no model_type in its config.json" if not model_type else "no tokenizer"
        raise AgentHubError(
            f"--model {model}: not a Hugging Face model directory (it has {lacks}); give "
            "one, a training run's model/ directory, or 'default'"
        )
    return path
