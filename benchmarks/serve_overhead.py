"""`agenthub serve` overhead: episodes/s of `math` played by N concurrent clients over
OpenEnv's WebSocket protocol, against the same episodes played in this process.

Both sides play the same episodes (task i of `train`, answered right for even i and wrong
for odd i, one step each) with N at a time: in-process, N asyncio workers each with its own
env; served, N WebSocket clients of one `agenthub serve --env math` process on this machine,
each its own session. Env construction and the first reset are outside the timing on both
sides (a trainer's session lives for many episodes). The sides take turns, `--rounds`
times each; the first round finds the verifier's parse cache cold on both sides (each
process has its own), later ones warm, as in a long run. The machine is shared, so each
round's ratio pairs two runs next to each other in time, and the median of them counts.
Printed: the server's memory per open session (its resident memory, children included,
with N sessions open less that before, over N), then, last, the served/in-process ratio of
episodes/s (target >= 0.8 at 64 sessions).

The clients share the machine with the server, so each is kept lean: websockets' own
protocol (`ClientProtocol`, sans-I/O) driven straight from an asyncio protocol, one future
per request, so the figure is the server's cost more than a client's. Each round also
says where the CPU went, in microseconds per episode: in-process, this process (the envs)
and its verifier workers; served, the server, its verifier workers and the clients.

    python benchmarks/serve_overhead.py [--clients 64] [--episodes 2048] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

import agenthub
from agenthub.envs.math._check import quiet_math_verify

REPO = Path(__file__).resolve().parent.parent


def answers(episodes: int) -> list[str]:
    """Right for even tasks, wrong for odd."""
    tasks = agenthub.make("math", num_tasks=episodes).tasks("train")
    return [
        f"\\boxed{{{task.label}}}" if i % 2 == 0 else f"\\boxed{{{i}.5}}"
        for i, task in enumerate(tasks)
    ]


def shares(episodes: int, clients: int) -> list[list[int]]:
    return [list(range(c, episodes, clients)) for c in range(clients)]


async def in_process(replies: list[str], clients: int) -> tuple[float, float, str]:
    """Episodes/s, the total reward and where the CPU went, N envs in this process."""
    envs = [agenthub.make("math", num_tasks=len(replies)) for _ in range(clients)]
    tasks = list(envs[0].tasks("train"))
    for env in envs:
        await env.reset(tasks[0])
    await envs[0].step("warm-up")  # the verifier pool starts outside the timing

    async def play(env: agenthub.Env[Any], mine: list[int]) -> float:
        total = 0.0
        for i in mine:
            await env.reset(tasks[i], seed=i)
            total += (await env.step(replies[i])).reward
        return total

    me = psutil.Process()
    before = _cpu(me)
    started = time.perf_counter()
    rewards = await asyncio.gather(
        *(play(e, s) for e, s in zip(envs, shares(len(replies), clients), strict=True))
    )
    took = time.perf_counter() - started
    spent = _per_episode(before, _cpu(me), len(replies))
    for env in envs:
        await env.aclose()
    return len(replies) / took, sum(rewards), f"envs {spent[0]:.0f} + verifiers {spent[1]:.0f}"


class LeanClient(asyncio.Protocol):
    """One OpenEnv WebSocket session: websockets' sans-I/O protocol on an asyncio
    transport, a request at a time."""

    def __init__(self, url: str) -> None:
        self._protocol = ClientProtocol(parse_uri(url))
        self._transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self._answer: asyncio.Future[bytes] | None = None

    @classmethod
    async def connect(cls, url: str) -> LeanClient:
        host, port = url.removeprefix("ws://").split("/")[0].split(":")
        loop = asyncio.get_running_loop()
        _, client = await loop.create_connection(lambda: cls(url), host, int(port))
        await client.opened
        return client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._protocol.send_request(self._protocol.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        self._protocol.receive_data(data)
        for event in self._protocol.events_received():
            if isinstance(event, Response):
                if event.status_code != 101:
                    self.opened.set_exception(RuntimeError(f"handshake: {event.status_code}"))
                else:
                    self.opened.set_result(None)
            elif isinstance(event, Frame) and event.opcode is Opcode.TEXT and self._answer:
                self._answer.set_result(bytes(event.data))
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(ConnectionError("the server closed the connection"))

    def _flush(self) -> None:
        assert self._transport is not None
        for chunk in self._protocol.data_to_send():
            if chunk:
                self._transport.write(chunk)

    async def ask(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        self._answer = asyncio.get_running_loop().create_future()
        self._protocol.send_text(json.dumps({"type": kind, "data": data}).encode())
        self._flush()
        answer: dict[str, Any] = json.loads(await self._answer)
        if answer["type"] == "error":
            raise RuntimeError(f"the server answered {answer['data']}")
        return answer["data"]  # type: ignore[no-any-return]

    def close(self) -> None:
        self._protocol.send_close()
        self._flush()
        assert self._transport is not None
        self._transport.close()


async def served(
    url: str, replies: list[str], clients: int, server: psutil.Process
) -> tuple[float, float, float, str]:
    """Episodes/s, the total reward, the server's bytes per open session and where the CPU
    went."""
    idle = _rss(server)
    ws_url = url.replace("http", "ws", 1) + "/ws"
    sockets = [await LeanClient.connect(ws_url) for _ in range(clients)]
    for ws in sockets:
        await ws.ask("reset", {"task_index": 0})
    await sockets[0].ask("step", {"message": "warm-up"})  # the server's verifier pool starts

    async def play(ws: LeanClient, mine: list[int]) -> float:
        total = 0.0
        for i in mine:
            await ws.ask("reset", {"task_index": i, "seed": i})
            total += (await ws.ask("step", {"message": replies[i]}))["reward"]
        return total

    me = psutil.Process()
    before, clients_before = _cpu(server), _cpu(me)
    started = time.perf_counter()
    plays = (play(ws, s) for ws, s in zip(sockets, shares(len(replies), clients), strict=True))
    rewards = await asyncio.gather(*plays)
    took = time.perf_counter() - started
    spent = _per_episode(before, _cpu(server), len(replies))
    spent_clients = _per_episode(clients_before, _cpu(me), len(replies))
    per_session = (_rss(server) - idle) / clients
    for ws in sockets:
        ws.close()
    cpu = f"server {spent[0]:.0f} + verifiers {spent[1]:.0f} + clients {spent_clients[0]:.0f}"
    return len(replies) / took, sum(rewards), per_session, cpu


def _cpu(process: psutil.Process) -> tuple[float, float]:
    """CPU seconds of `process` itself and of its live children (the verifier workers)."""
    own = sum(process.cpu_times()[:2])
    children = 0.0
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # gone since listed
            children += sum(child.cpu_times()[:2])
    return own, children


def _per_episode(
    before: tuple[float, float], after: tuple[float, float], episodes: int
) -> tuple[float, float]:
    """CPU microseconds per episode, of the process and of its children."""
    return tuple(  # type: ignore[return-value]
        (b - a) * 1e6 / episodes for a, b in zip(before, after, strict=True)
    )


def _rss(process: psutil.Process) -> int:
    """Resident bytes of the server and its children (the math verifier's workers)."""
    return sum(p.memory_info().rss for p in [process, *process.children(recursive=True)])


def start_server(episodes: int, clients: int) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "agenthub", "serve", "--env", "math", f"num_tasks={episodes}"]
    command += ["--port", str(port), "--max-sessions", str(clients)]
    process = subprocess.Popen(command, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("agenthub serve did not start")
        time.sleep(0.2)


async def run(args: argparse.Namespace) -> None:
    process, url = start_server(args.episodes, args.clients)
    try:
        server = psutil.Process(process.pid)
        replies = answers(args.episodes)
        ratios, per_session = [], 0.0
        for round_ in range(args.rounds):
            local, local_reward, local_cpu = await in_process(replies, args.clients)
            served_run = await served(url, replies, args.clients, server)
            remote, remote_reward, per_session, served_cpu = served_run
            assert local_reward == remote_reward, (local_reward, remote_reward)
            print(
                f"round {round_}: in-process {local:.0f} episodes/s, served {remote:.0f} "
                f"episodes/s (reward {remote_reward:.0f} of {args.episodes} on both); CPU us "
                f"per episode: in-process {local_cpu}; served {served_cpu}"
            )
            ratios.append(remote / local)
    finally:
        process.terminate()
        process.wait(timeout=30)
    print(f"clients: {args.clients}, episodes per round: {args.episodes}")
    print(f"per-round ratios: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"server memory per open session: {per_session / 1024:.0f} KiB")
    print(f"served/in-process episodes/s ratio (median): {statistics.median(ratios):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--episodes", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    quiet_math_verify()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
