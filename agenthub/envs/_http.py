"""`JsonEndpoint`: POST JSON to one of several URLs, with the limits every remote scorer needs.

Concurrency limits are shared by every endpoint with the same URLs and policy in one event
loop, the requests-per-minute budget and the response cache by all of them in the process, and
the rotation of the starting URL by every endpoint with the same URLs in the process: an
environment is built per episode, and the limits and the spread of load must hold across
episodes, not per instance.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import random
import ssl
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx

from agenthub._errors import AgentHubError

T = TypeVar("T")


@dataclass(frozen=True)
class HttpPolicy:
    """How a remote scorer is called."""

    timeout_s: float = 30.0
    """Per attempt, connecting included."""
    max_retries: int = 3
    """Further attempts after a timeout, connection error or 5xx answer (never after a 4xx)."""
    backoff_s: float = 0.5
    """Base of the jittered exponential backoff between attempts."""
    max_concurrency: int = 64
    """Requests in flight at once to these URLs, per event loop."""
    requests_per_minute: float | None = None
    """Request budget for these URLs in this process (`None`: unlimited)."""
    cache_size: int = 0
    """Answers remembered, keyed by the request (0: no cache). Failures are never cached."""


class ResponseCache:
    """A thread-safe LRU map from a request (any JSON value) to its parsed answer."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    @staticmethod
    def key(request: Any) -> str:
        return json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)

    def get(self, key: str) -> tuple[bool, Any]:
        with self._lock:
            if key not in self._items:
                return False, None
            self._items.move_to_end(key)
            self.hits += 1
            return True, self._items[key]

    def put(self, key: str, value: Any) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class _RateLimiter:
    """Spaces requests `60 / rpm` seconds apart; loop-agnostic (a slot is reserved under a lock)."""

    def __init__(self, requests_per_minute: float) -> None:
        self.interval = 60.0 / requests_per_minute
        self._next = 0.0
        self._lock = threading.Lock()

    async def wait(self) -> None:
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + self.interval
        await anyio.sleep(slot - now)


_Key = tuple[tuple[str, ...], HttpPolicy]
_shared_lock = threading.Lock()
_caches: dict[_Key, ResponseCache] = {}
_rates: dict[_Key, _RateLimiter] = {}
_rotations: dict[tuple[str, ...], Iterator[int]] = {}
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_Key, anyio.Semaphore]]
_semaphores = weakref.WeakKeyDictionary()


def shared_cache(key: _Key) -> ResponseCache:
    with _shared_lock:
        return _caches.setdefault(key, ResponseCache(key[1].cache_size))


def _rate_limiter(key: _Key) -> _RateLimiter | None:
    rpm = key[1].requests_per_minute
    if rpm is None:
        return None
    with _shared_lock:
        return _rates.setdefault(key, _RateLimiter(rpm))


def _rotation(urls: tuple[str, ...]) -> Iterator[int]:
    with _shared_lock:
        return _rotations.setdefault(urls, itertools.count())


def _semaphore(key: _Key) -> anyio.Semaphore:
    loop = asyncio.get_running_loop()
    with _shared_lock:
        per_loop = _semaphores.setdefault(loop, {})
        if key not in per_loop:
            per_loop[key] = anyio.Semaphore(key[1].max_concurrency)
        return per_loop[key]


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (~30 ms); one env per episode must not pay that.
    return ssl.create_default_context()


class JsonEndpoint:
    """POSTs JSON bodies to `urls` under an `HttpPolicy`; errors are raised as `error`.

    Each request starts at the next URL of a rotation shared by the endpoints with these URLs
    in the process. Timeouts, connection errors and 5xx answers are retried with jittered
    exponential backoff, each retry on the next URL; a 4xx answer is the caller's fault and is
    raised at once, as is an answer that is not JSON or that `parse` rejects. `service` names
    the server in messages.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        policy: HttpPolicy,
        *,
        service: str,
        error: type[AgentHubError],
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise ValueError(f"the {service} client needs at least one URL")
        self.policy = policy
        self.service = service
        self.error = error
        self.key: _Key = (tuple(self.urls), policy)
        self.cache = shared_cache(self.key)
        self._rotation = _rotation(self.key[0])
        self._client = httpx.AsyncClient(
            timeout=policy.timeout_s, transport=transport, verify=_ssl_context(), headers=headers
        )

    def next_first_url(self) -> int:
        """The index, modulo the number of URLs, of the URL the next request starts at."""
        with _shared_lock:
            return next(self._rotation)

    async def post(
        self, body: dict[str, Any], parse: Callable[[str, Any], T], *, first_url: int | None = None
    ) -> T:
        """POST `body` and return `parse(url, answer_json)`, from the cache when allowed. The
        first attempt goes to URL `first_url` (default: `next_first_url()`), a retry to the next."""
        cache_key = ResponseCache.key(body) if self.policy.cache_size > 0 else None
        if cache_key is not None:
            hit, value = self.cache.get(cache_key)
            if hit:
                return value  # type: ignore[no-any-return]
        async with _semaphore(self.key):
            start = self.next_first_url() if first_url is None else first_url
            url, payload = await self._post_with_retries(body, start)
        value = parse(url, payload)
        if cache_key is not None:
            self.cache.put(cache_key, value)
        return value

    async def _post_with_retries(self, body: dict[str, Any], first_url: int) -> tuple[str, Any]:
        policy, rate = self.policy, _rate_limiter(self.key)
        failures: list[str] = []
        for attempt in range(policy.max_retries + 1):
            url = self.urls[(first_url + attempt) % len(self.urls)]
            if attempt:
                await anyio.sleep(policy.backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))
            if rate is not None:
                await rate.wait()
            try:
                with anyio.fail_after(policy.timeout_s):
                    response = await self._client.post(url, json=body)
            except (httpx.TransportError, TimeoutError) as exc:
                failures.append(f"{url}: {type(exc).__name__} {exc}".strip())
                continue
            if response.status_code >= 500:
                failures.append(f"{url}: HTTP {response.status_code}")
                continue
            if response.status_code >= 400:
                raise self.error(
                    f"{self.service} {url} rejected the request with HTTP "
                    f"{response.status_code}: {response.text[:300]}"
                )
            try:
                return url, response.json()
            except ValueError as exc:
                raise self.error(
                    f"{self.service} {url} answered non-JSON: {response.text[:200]!r}"
                ) from exc
        raise self.error(
            f"{self.service} did not answer after {len(failures)} attempts "
            f"(timeout {policy.timeout_s:g} s each): {'; '.join(failures)}. Check that the server "
            "is running and reachable, or raise the timeout."
        )

    async def aclose(self) -> None:
        await self._client.aclose()
