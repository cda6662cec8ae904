"""What agenthub takes from DeepSpeed beyond its public API, in one place.

Written against DeepSpeed 0.19 (0.19.8). The one internal is `deepspeed.ops.__compatible_ops__`,
the table of ops DeepSpeed may build on first use: DeepSpeed offers no setting to leave out its
shared-memory all-reduce for CPU ranks (`DS_BUILD_SHM_COMM` only chooses what `pip install`
prebuilds), which it compiles when its communication backend starts, half a minute of both
cores on a small machine, even for one rank with nothing to reduce with.
"""

from __future__ import annotations

from agenthub._errors import AgentHubError
from agenthub._versions import unsupported_series

__all__ = ["SUPPORTED", "UnsupportedDeepSpeedError", "check_version", "skip_shared_memory_comm"]

SUPPORTED = ((0, 19),)
"""The DeepSpeed release series (major, minor) this module was written against and tested with."""

UNCHECKED = "AGENTHUB_UNCHECKED_DEEPSPEED"


class UnsupportedDeepSpeedError(AgentHubError, ImportError):
    """The installed DeepSpeed is not a release this module was written against."""


def check_version(found: str) -> None:
    """Raise `UnsupportedDeepSpeedError` unless `found` (a DeepSpeed version string) is in a
    supported series, or `AGENTHUB_UNCHECKED_DEEPSPEED=1` asks to try it anyway."""
    wanted = unsupported_series(found, SUPPORTED, UNCHECKED)
    if wanted is None:
        return
    pins = " or ".join(f"'deepspeed=={major}.{minor}.*'" for major, minor in SUPPORTED)
    raise UnsupportedDeepSpeedError(
        f"DeepSpeed {found} is installed, but agenthub's learner uses a DeepSpeed internal "
        f"written against DeepSpeed {wanted}: install {pins}, or set {UNCHECKED}=1 to try this "
        "version anyway"
    )


def skip_shared_memory_comm() -> None:
    """Mark DeepSpeed's shared-memory all-reduce op as not wanted in this process, before
    `deepspeed.init_distributed` starts its communication backend (which would build it)."""
    import deepspeed
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

    check_version(str(deepspeed.__version__))
    deepspeed.ops.__compatible_ops__[ShareMemCommBuilder.NAME] = False
