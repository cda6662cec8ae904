"""The embedded default model: built locally, deterministically and offline, because no model
hub is reachable from the machines agenthub runs on.

It is a byte-level BPE tokenizer trained on the built-in tasks' text, with a Qwen-style chat
template, and a small Qwen2-architecture causal LM warm-started by a short supervised run on the
demonstrations that built-in procedural tasks carry (`metadata["reference"]`). Every command that
needs a model and is given none calls `ensure_default_model()`.
"""

from agenthub.agents.default_model._build import (
    MANIFEST,
    build_default_model,
    default_cache_dir,
    default_model_key,
    ensure_default_model,
)
from agenthub.agents.default_model._config import BUILDER_VERSION, DefaultModelConfig
from agenthub.agents.default_model._demos import (
    Demonstration,
    DemonstrationError,
    collect_demonstrations,
)
from agenthub.agents.default_model._progress import (
    BuildProgress,
    RichBuildProgress,
    SilentBuildProgress,
)

__all__ = [
    "BUILDER_VERSION",
    "MANIFEST",
    "BuildProgress",
    "DefaultModelConfig",
    "Demonstration",
    "DemonstrationError",
    "RichBuildProgress",
    "SilentBuildProgress",
    "build_default_model",
    "collect_demonstrations",
    "default_cache_dir",
    "default_model_key",
    "ensure_default_model",
]
