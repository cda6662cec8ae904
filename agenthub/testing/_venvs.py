"""A venv for one foreign package's pins, layered over this interpreter's packages."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

__all__ = ["overlay_venv"]


def overlay_venv(where: Path) -> Path:
    """Make a venv at `where` that sees this interpreter's site-packages through a `.pth`
    file, so what is installed into it shadows ours there only; its python."""
    venv.EnvBuilder(with_pip=True).create(where)
    python = where / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages")]
    (Path(site) / "agenthub-project.pth").write_text("\n".join(ours) + "\n")
    return python
