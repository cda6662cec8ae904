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

Each round also plays the same frames against a bare echo: the same server stack (uvicorn,
websockets' protocol, an ASGI task per connection) answering every frame with the reply
`agenthub serve` would give, with no env, no Starlette and none of agenthub's handling:
what the transport alone costs, server and clients. A served episode costs at least an
in-process one's CPU plus that, so where the cores are the limit the ratio cannot pass
`cores / (in-process CPU + echo CPU) / in-process episodes/s`, printed as the ceiling.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

import agenthub
from agenthub import Step
from agenthub._listen import listen, run_app
from agenthub.cli._serve import SERVER_OPTIONS
from agenthub.envs.math._check import quiet_math_verify
from agenthub.integrations.openenv_server._protocol import (
    reset_observation,
    step_observation,
    wire_result,
)

REPO = Path(__file__).resolve().parent.parent
CORES = psutil.cpu_count() or 1


def answers(episodes: int) -> list[str]:
    """Right for even tasks, wrong for odd."""
    tasks = agenthub.make("math", num_tasks=episodes).tasks("train")
    return [
        f"\\boxed{{{task.label}}}" if i % 2 == 0 else f"\\boxed{{{i}.5}}"
        for i, task in enumerate(tasks)
    ]


def shares(episodes: int, clients: int) -> list[list[int]]:
    return [list(range(c, episodes, clients)) for c in range(clients)]


@dataclass(frozen=True)
class Played:
    """One side's round: episodes/s, the total reward, CPU microseconds per episode (each
    part's, all of them together in `cpu_us`) and, served, the server's bytes per session."""

    per_s: float
    reward: float
    cpu: dict[str, float]
    per_session: float = 0.0

    @property
    def cpu_us(self) -> float:
        return sum(self.cpu.values())

    def said(self) -> str:
        return " + ".join(f"{part} {us:.0f}" for part, us in self.cpu.items())


async def in_process(replies: list[str], clients: int) -> Played:
    """N envs in this process."""
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
    return Played(len(replies) / took, sum(rewards), {"envs": spent[0], "verifiers": spent[1]})


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


async def served(url: str, replies: list[str], clients: int, server: psutil.Process) -> Played:
    """N WebSocket clients of the server at `url`."""
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
    cpu = {"server": spent[0], "verifiers": spent[1], "clients": spent_clients[0]}
    return Played(len(replies) / took, sum(rewards), cpu, per_session)


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


def start_server(*argv: str) -> tuple[subprocess.Popen[bytes], str]:
    """`python ARGV --port N` on a free port, once it answers /health."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    process = subprocess.Popen([sys.executable, *argv, "--port", str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{' '.join(argv)} did not start")
        time.sleep(0.2)


def canned_replies() -> tuple[str, str]:
    """What `agenthub serve --env math` answers to a reset and to a (right) step, as text."""
    env = agenthub.make("math")
    task = next(iter(env.tasks("train")))
    opened = reset_observation(task, [], env.system_prompt, env.tools, env.stop)
    logs = {"attempts": 1.0, "correct": 1.0}
    stepped = step_observation(task.id, Step([], 1.0, terminated=True, score=1.0, extra_logs=logs))
    return (
        json.dumps({"type": "observation", "data": wire_result(opened, None, False)}),
        json.dumps({"type": "observation", "data": wire_result(stepped, 1.0, True)}),
    )


def bare_echo_app() -> Any:
    """The floor: the same server stack (uvicorn, websockets' protocol, one ASGI task per
    connection) answering each frame with the canned reply, no env and no agenthub."""
    opened, stepped = canned_replies()
    health = {"type": "http.response.body", "body": b'{"status": "healthy"}'}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send(health)
            return
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while (message := await receive())["type"] == "websocket.receive":
            reset = message["text"].startswith('{"type": "reset"')
            await send({"type": "websocket.send", "text": opened if reset else stepped})

    return app


def serve_bare_echo(port: int) -> None:
    listener = listen("127.0.0.1", port)
    run_app(bare_echo_app(), listener, lifespan="off", **SERVER_OPTIONS)


async def run(args: argparse.Namespace) -> None:
    serve = ["-m", "agenthub", "serve", "--env", "math", f"num_tasks={args.episodes}"]
    process, url = start_server(*serve, "--max-sessions", str(args.clients))
    echo, echo_url = start_server(__file__, "--bare-echo")
    try:
        server, echo_server = psutil.Process(process.pid), psutil.Process(echo.pid)
        replies = answers(args.episodes)
        ratios, ceilings, per_session = [], [], 0.0
        for round_ in range(args.rounds):
            local = await in_process(replies, args.clients)
            remote = await served(url, replies, args.clients, server)
            assert local.reward == remote.reward, (local.reward, remote.reward)
            bare = await served(echo_url, replies, args.clients, echo_server)
            ceiling = ceiling_ratio(local, bare)
            print(
                f"round {round_}: in-process {local.per_s:.0f} episodes/s, served "
                f"{remote.per_s:.0f} (reward {remote.reward:.0f} of {args.episodes} on both), "
                f"bare echo {bare.per_s:.0f}; CPU us per episode: in-process {local.said()}; "
                f"served {remote.said()}; bare echo {bare.said()}; ceiling {ceiling:.2f}"
            )
            ratios.append(remote.per_s / local.per_s)
            ceilings.append(ceiling)
            per_session = remote.per_session
    finally:
        for child in (process, echo):
            child.terminate()
            child.wait(timeout=30)
    print(f"clients: {args.clients}, episodes per round: {args.episodes}, cores: {CORES}")
    print(f"per-round ratios: {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"ceiling of the ratio on these cores (median): {statistics.median(ceilings):.2f}")
    print(f"server memory per open session: {per_session / 1024:.0f} KiB")
    print(f"served/in-process episodes/s ratio (median): {statistics.median(ratios):.2f}")


def ceiling_ratio(local: Played, bare: Played) -> float:
    """The most the ratio can be here when the cores are the limit: a served episode costs at
    least the in-process episode's CPU plus the bare echo's (its transport), and all the
    machine's cores, idle of anything else, give at most CORES CPU seconds a second."""
    best_served = CORES * 1e6 / (local.cpu_us + bare.cpu_us)
    return best_served / local.per_s


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--episodes", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bare-echo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_echo:
        serve_bare_echo(args.port)
        return
    quiet_math_verify()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
