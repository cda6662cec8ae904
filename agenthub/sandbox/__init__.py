"""Running untrusted code: the `Sandbox` seam and its backends.

`open_sandbox("auto")` gives a docker warm pool when the engine and the image
(`agenthub sandbox build-image`) are there, else bubblewrap; `SharedSandbox` is the handle
environments hold so that all their instances share one pool. `FakeSandbox` stands in for a
sandbox in unit tests.
"""

from agenthub.sandbox._auto import BACKENDS, open_sandbox, resolve_backend
from agenthub.sandbox._base import Sandbox
from agenthub.sandbox._docker import IMAGE, DockerSandbox, default_pool_size, remove_leftovers
from agenthub.sandbox._fake import FakeSandbox, SandboxRequest, run_in_subprocess
from agenthub.sandbox._image import build_image, image_exists
from agenthub.sandbox._process import BwrapSandbox, UnisolatedSandbox
from agenthub.sandbox._shared import SharedSandbox
from agenthub.sandbox._types import (
    ExecResult,
    ExecStatus,
    Limits,
    SandboxEngineError,
    SandboxError,
    SandboxUnavailableError,
)

__all__ = [
    "BACKENDS",
    "IMAGE",
    "BwrapSandbox",
    "DockerSandbox",
    "ExecResult",
    "ExecStatus",
    "FakeSandbox",
    "Limits",
    "Sandbox",
    "SandboxEngineError",
    "SandboxError",
    "SandboxRequest",
    "SandboxUnavailableError",
    "SharedSandbox",
    "UnisolatedSandbox",
    "build_image",
    "default_pool_size",
    "image_exists",
    "open_sandbox",
    "remove_leftovers",
    "resolve_backend",
    "run_in_subprocess",
]
