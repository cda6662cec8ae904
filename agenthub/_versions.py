"""The release series a seam over another library's internals was written against."""

from __future__ import annotations

import os

__all__ = ["unsupported_series"]


def unsupported_series(
    found: str, supported: tuple[tuple[int, int], ...], unchecked: str
) -> str | None:
    """None when version `found` is in one of the `supported` (major, minor) series, or the
    environment variable `unchecked` is "1" (try it anyway); else the series wanted, as
    "0.32.x, ..." for the error that says what to install."""
    from packaging.version import InvalidVersion, Version

    try:
        series = Version(found).release[:2]
    except InvalidVersion:
        series = ()
    if series in supported or os.environ.get(unchecked) == "1":
        return None
    return ", ".join(f"{major}.{minor}.x" for major, minor in supported)
