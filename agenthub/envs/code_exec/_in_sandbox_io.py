"""The stdin/stdout harness (`main.py` in the sandbox): each case is a real `python3
solution.py` process fed the case's input, its output compared with the expected one here."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from harness_common import Report, harden, read_job, reporter  # type: ignore[import-not-found]


def norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def run(config: dict[str, Any], report: Report) -> None:
    limit = float(config["per_test_s"])
    for i, case in enumerate(config["cases"]):
        try:
            done = subprocess.run(
                [sys.executable, "solution.py"],
                input=case["stdin"].encode(),
                capture_output=True,
                timeout=limit,
                check=False,
            )
        except subprocess.TimeoutExpired:
            report(test=i, passed=False, error=f"timed out after {limit} s")
            continue
        printed = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
            report(test=i, passed=False, error="\n".join(lines[-3:])[:500])
        elif norm(printed) != norm(case["stdout"]):
            error = f"printed {printed[:200]!r}, expected {case['stdout'][:200]!r}"
            report(test=i, passed=False, error=error)
        else:
            report(test=i, passed=True, error=None)


if __name__ == "__main__":
    nonce, config = read_job()
    harden()
    run(config, reporter(nonce, sys.stdout))
