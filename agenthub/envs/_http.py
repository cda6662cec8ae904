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
from typing import Any, Literal, TypeVar

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
    """Further attempts after a timeout, connection error, 5xx, 408 or 429 answer (never after
    another 4xx)."""
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


def url_list(urls: str | Sequence[str], *, argument: str, example: str) -> list[str]:
    """`urls` as a list of HTTP URLs; a string may hold several separated by commas, as
    OpenRLHF's `--remote_rm_url` does. Raises `ValueError` naming `argument` for an entry that
    is not an `http://` or `https://` URL with a host, showing `example`."""
    entries = urls.split(",") if isinstance(urls, str) else list(urls)
    found = [url.strip() for url in entries if url.strip()]
    if not found:
        raise ValueError(f"{argument} needs at least one URL, such as {example}")
    for url in found:
        if url.endswith(".py"):
            raise ValueError(
                f"{argument}: {url!r} is a Python file, not a URL; a reward function file goes "
                f"to the reward_func env as reward_func={url!r} (one file, no URLs), or is "
                f"served with `agenthub serve-rm --reward-func {url}`"
            )
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL:
            parsed = None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(
                f"{argument}: {url!r} is not an HTTP URL; write it as {example} (http:// or "
                "https://, the host, then the port and path)"
            )
    return found


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (~30 ms); one env per episode must not pay that.
    return ssl.create_default_context()


class JsonEndpoint:
    """POSTs JSON bodies to `urls` under an `HttpPolicy`; errors are raised as `error`.

    Redirects are followed. Each request starts at the next URL of a rotation shared by the
    endpoints with these URLs in the process. Timeouts, connection errors, 5xx, 408 and 429
    answers are retried with jittered exponential backoff, or after the seconds of a
    `Retry-After` header (capped at the timeout and at 60 s), each retry on the next URL;
    another 4xx answer is the caller's fault and is raised at once, as is an answer that is not
    JSON or that `parse` rejects. `service` names the server in messages; a failure quotes what
    each attempt got, answers included. When an attempt got no answer, the error's `__cause__`
    is why (see `server_answered`).
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
            timeout=policy.timeout_s,
            transport=transport,
            verify=_ssl_context(),
            headers=headers,
            follow_redirects=True,  # a 307 or 308 repeats the POST with its body
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
        failures: list[_Failure] = []
        no_answer: BaseException | None = None
        retry_after: float | None = None
        for attempt in range(policy.max_retries + 1):
            url = self.urls[(first_url + attempt) % len(self.urls)]
            if attempt:
                backoff = policy.backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
                await anyio.sleep(backoff if retry_after is None else retry_after)
            if rate is not None:
                await rate.wait()
            try:
                with anyio.fail_after(policy.timeout_s):
                    response = await self._client.post(url, json=body)
            except (httpx.TransportError, TimeoutError) as exc:
                timed_out = isinstance(exc, httpx.TimeoutException | TimeoutError)
                what = f"{type(exc).__name__} {exc}".strip().rstrip(".")
                failures.append(_Failure(url, "timeout" if timed_out else "unreachable", what))
                no_answer, retry_after = exc, None
                continue
            status = response.status_code
            if status >= 500 or status in _TRY_AGAIN:
                failures.append(_Failure(url, "answered", f"HTTP {status}: {_excerpt(response)}"))
                retry_after = _retry_after(response, cap_s=min(policy.timeout_s, 60.0))
                if status in _BUSY and no_answer is None:
                    no_answer = ServerBusy(f"HTTP {status}")
                continue
            if status >= 400:
                raise self.error(
                    f"{self.service} {url} rejected the request with HTTP "
                    f"{status}: {response.text[:300]}"
                )
            try:
                return url, response.json()
            except ValueError as exc:
                raise self.error(
                    f"{self.service} {url} answered non-JSON: {response.text[:200]!r}"
                ) from exc
        raise self.error(_gave_up(self.service, failures, policy.timeout_s)) from no_answer

    async def aclose(self) -> None:
        await self._client.aclose()


class ServerBusy(Exception):
    """An attempt was answered with a status that says the server is overloaded, not that
    the request is wrong."""


def server_answered(exc: BaseException) -> bool:
    """Whether an endpoint's error comes from what servers answered to the request itself (an
    error status, an answer that cannot be used), not from an attempt that got no answer (a
    timeout, a refused connection) or was told to come back later (408, 429, 502-504): only
    then may the request itself be to blame, and sending its parts again not add to a load."""
    return not isinstance(exc.__cause__, httpx.TransportError | TimeoutError | ServerBusy)


_TRY_AGAIN = frozenset({408, 429})
"""4xx statuses retried like a 5xx: Request Timeout and Too Many Requests ask to try again."""
_BUSY = frozenset({408, 429, 502, 503, 504})
"""Statuses of an overloaded server or its gateway rather than of a bad request."""


@dataclass(frozen=True)
class _Failure:
    url: str
    kind: Literal["answered", "timeout", "unreachable"]
    what: str


_HINTS = {
    "answered": "the server's answers say why",
    "timeout": "raise the timeout if the server is only slow",
    "unreachable": "check that the server is running and reachable at that URL",
}


def _gave_up(service: str, failures: list[_Failure], timeout_s: float) -> str:
    n = len(failures)
    attempts = f"{n} attempt{'' if n == 1 else 's'}"
    kinds = {f.kind for f in failures}
    if kinds == {"answered"}:
        summary = f"answered {attempts} with an error status"
    elif kinds == {"unreachable"}:
        summary = f"could not be reached in {attempts}"
    elif kinds == {"timeout"}:
        summary = f"did not answer after {attempts} (timeout {timeout_s:g} s each)"
    else:
        summary = f"failed {attempts} (timeout {timeout_s:g} s each)"
    detail = "; ".join(f"{f.url}: {f.what}" for f in failures)
    hint = "; ".join(h for kind, h in _HINTS.items() if kind in kinds)
    return f"{service} {summary}: {detail}. {hint[0].upper()}{hint[1:]}."


def _excerpt(response: httpx.Response, limit: int = 300) -> str:
    text = " ".join(response.text.split())
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _retry_after(response: httpx.Response, *, cap_s: float) -> float | None:
    """The delay a `Retry-After: SECONDS` header asks for, at most `cap_s`; None without one
    (an HTTP date is not read)."""
    try:
        seconds = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return min(seconds, cap_s) if 0 <= seconds < float("inf") else None
