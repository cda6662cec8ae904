"""Building the docker sandbox image from a Debian root filesystem, with no registry pull."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agenthub.sandbox._docker import IMAGE
from agenthub.sandbox._docker_engine import IMAGE_LABEL, connect
from agenthub.sandbox._types import SandboxError

__all__ = ["build_image", "image_exists"]

# Left out of the image: documentation, translations and apt's caches (about half the size).
_STRIP = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt")


def image_exists(tag: str = IMAGE) -> bool:
    import docker

    client = connect(timeout_s=30)
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    finally:
        client.close()
    return True


def build_image(
    tag: str = IMAGE,
    *,
    suite: str = "bookworm",
    mirror: str | None = None,
    log: Callable[[str], None] = print,
) -> float:
    """Debootstrap a minimal Debian `suite` with python3 and `docker import` it as `tag`;
    returns the seconds it took. Needs root, `debootstrap` and a reachable Debian mirror
    (`mirror`, default debootstrap's own)."""
    if os.geteuid() != 0:
        raise SandboxError("building the sandbox image needs root (debootstrap); use sudo")
    if shutil.which("debootstrap") is None:
        raise SandboxError("debootstrap is not installed (apt-get install debootstrap)")
    client = connect()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="agenthub-rootfs-") as tmp:
        root = Path(tmp) / "root"
        command = ["debootstrap", "--variant=minbase", "--include=python3", suite, str(root)]
        log(f"debootstrap {suite} (minbase + python3) into {root}")
        done = subprocess.run([*command, *([mirror] if mirror else [])], capture_output=True)
        if done.returncode != 0:
            tail = done.stdout.decode(errors="replace")[-1500:]
            raise SandboxError(f"debootstrap failed (exit {done.returncode}):\n{tail}")
        for part in _STRIP:
            shutil.rmtree(root / part, ignore_errors=True)
        for lists in (root / "var/lib/apt/lists").glob("*"):
            if lists.is_file():
                lists.unlink()
        archive = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(root), "-cf", str(archive), "."], check=True)
        repository, _, version = tag.rpartition(":")
        log(f"docker import as {tag}")
        client.api.import_image_from_file(
            str(archive),
            repository=repository or tag,
            tag=version if repository else None,
            changes=[f"LABEL {IMAGE_LABEL}={version or 'latest'}", "WORKDIR /"],
        )
    client.close()
    return time.monotonic() - start
