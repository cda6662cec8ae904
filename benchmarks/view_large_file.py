"""`agenthub view` on a 500 MB trajectories.jsonl: time to the first page, server memory.

Writes a run directory whose trajectories.jsonl holds `--mb` megabytes of real `Trajectory`
lines (4,096 tokens each: 1,024 of prompt, 3,072 sampled), starts `agenthub view` on it as a
subprocess, and times what opening the episode table asks for: the page itself, the runs list
and the first 50 rows, then one episode token by token. It then waits for the background index
to cover the whole file, asks for a sort by reward and the curves (both over every episode),
and samples the server's resident memory all along (and prints it once started, after the first
page and after the first episode, which decodes tokens with the run's tokenizer). The baseline,
in this process: reading the file with one `json.loads` per line, as a notebook would, before
it can show anything. Issue 33 asks for the first page in under 2 s and the server under
300 MB; the last line is the first page's time against the 2 s target and the server's peak
memory against 300 MB.

    python benchmarks/view_large_file.py [--mb 500] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from agenthub.agents import Timings, Trajectory

TARGET_S = 2.0
TARGET_MB = 300.0


def write_run(directory: Path, megabytes: int) -> int:
    """A run directory of `megabytes` of trajectories; returns the number of lines."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "eval.json").write_text(json.dumps({"env": "code_exec", "model": "default"}))
    rng = random.Random(0)
    prompt, reply = 1024, 3072
    template = Trajectory(
        env="code_exec",
        task_id="TASK",
        # ids the embedded default model's vocabulary has, so the episode's tokens decode
        tokens=[rng.randrange(3, 1_000) for _ in range(prompt + reply)],
        loss_mask=[0] * prompt + [1] * reply,
        logprobs=[0.0] * prompt + [-round(rng.random(), 6) for _ in range(reply)],
        policy_versions=[0] * prompt + [3] * reply,
        step_rewards=[0.0, 1.0],
        reward=1.0,
        terminated=True,
        truncated=False,
        num_turns=2,
        timings=Timings(generate_s=1.0, env_s=0.1, total_s=1.1),
    ).model_dump_json()
    head, tail = template.split('"TASK"', 1)
    lines = 0
    with (directory / "trajectories.jsonl").open("w", encoding="utf-8") as out:
        while out.tell() < megabytes * 1_000_000:
            line = f'{head}"task-{lines % 997}"{tail}'
            line = line.replace('"reward":1.0', f'"reward":{lines % 3 / 2}', 1)
            out.write(line + "\n")
            lines += 1
    return lines


class MemoryWatch:
    """Peak resident memory of a process, sampled every 20 ms in a thread."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.NoSuchProcess:
                return

    def now(self) -> float:
        """Resident megabytes at this moment."""
        return float(self.process.memory_info().rss / 1e6)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak / 1e6


def naive_load(path: Path) -> float:
    """Seconds to parse every line before showing anything (nothing is kept)."""
    start = time.perf_counter()
    with path.open("rb") as file:
        for line in file:
            json.loads(line)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=500, help="size of the file (500)")
    parser.add_argument("--keep", type=Path, default=None, help="write the run here and keep it")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="view-bench-"))
    run = root / "run"
    try:
        started = time.perf_counter()
        lines = write_run(run, args.mb)
        size = (run / "trajectories.jsonl").stat().st_size / 1e6
        print(f"wrote {size:.0f} MB, {lines} trajectories in {time.perf_counter() - started:.1f} s")
        first_page, peak = measure(run, lines)
        baseline = naive_load(run / "trajectories.jsonl")
        print(f"baseline: json.loads of every line (before a notebook shows one): {baseline:.2f} s")
        print(
            f"ratio: first page {first_page:.3f} s / {TARGET_S:.0f} s target = "
            f"{first_page / TARGET_S:.3f}; server peak {peak:.0f} MB / {TARGET_MB:.0f} MB "
            f"target = {peak / TARGET_MB:.2f}"
        )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


def measure(run: Path, lines: int) -> tuple[float, float]:
    """Serve the run and time it; returns the first page's seconds and the peak megabytes."""
    command = [sys.executable, "-m", "agenthub", "view", str(run), "--no-browser"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as server:
        assert server.stdout is not None
        url = re.search(r"http://\S+/", server.stdout.readline())
        assert url, "agenthub view printed no address"
        watch = MemoryWatch(server.pid)
        print(f"server resident memory once listening: {watch.now():.0f} MB")
        try:
            with httpx.Client(base_url=url.group(), timeout=120) as client:
                start = time.perf_counter()
                client.get("/").raise_for_status()
                page = client.get("/api/runs/0/episodes?limit=50").json()
                first_page = time.perf_counter() - start
                paged = watch.now()
                assert len(page["rows"]) == 50, page
                episode = client.get("/api/runs/0/episodes/0").json()
                first_episode = time.perf_counter() - start
                print(
                    f"first page of the episode table: {first_page:.3f} s "
                    f"(index had {page['indexed']} of {lines} lines); "
                    f"server then {paged:.0f} MB"
                )
                print(
                    f"  and its first episode, token by token: {first_episode:.3f} s; "
                    f"server then {watch.now():.0f} MB"
                )
                texts = sum(1 for p in episode["pieces"] if p and not p.startswith("#"))
                print(
                    f"  ({texts} of {len(episode['pieces'])} tokens decoded to text; "
                    f"notices: {episode['notices'] or 'none'})"
                )
                while client.get("/api/runs/0").json()["indexing"]:
                    time.sleep(0.2)
                indexed = time.perf_counter() - start
                print(f"whole file indexed in the background after {indexed:.2f} s")
                best = client.get("/api/runs/0/episodes?sort=reward&desc=1").json()
                assert best["matching"] == lines
                client.get("/api/runs/0/curves").raise_for_status()
                print(f"sorted by reward and drew the curves: {time.perf_counter() - start:.2f} s")
        finally:
            peak = watch.stop()
            server.terminate()
            server.wait(timeout=30)
    print(f"server peak resident memory: {peak:.0f} MB (target < {TARGET_MB:.0f} MB)")
    return first_page, peak


if __name__ == "__main__":
    main()
