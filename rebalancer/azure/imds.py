"""Client of the Azure Instance Metadata Service: Scheduled Events and the VM's own name.

Rules of the real service that this client keeps:
- plain HTTP, `Metadata: true` on every request, never through a proxy (proxy variables ignored);
- at most 4 requests per second (a floor between request starts), under the service's 5;
- the first Scheduled Events call may take up to two minutes (enabling the feature): it gets a
  long timeout of its own and is not an outage;
- 429 and 5xx are retried with backoff, 410 for up to 70 seconds; Retry-After is honoured up to
  `max_retry_after_seconds` (3 s) and never past the retry budget: a Preempt gives 30 s of notice,
  so a poll that slept the 60 s a server asked for would lose it whole. The request rate stays
  far under the service's limit either way (one poll per tick, starts at least 0.25 s apart);
- an answer is read up to a size cap, so a garbage body cannot eat memory.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from rebalancer.azure.scheduled_events import Document, DocumentError, parse_document
from rebalancer.clock import Clock, SystemClock
from rebalancer.retry import Backoff

SCHEDULED_EVENTS_PATH = "/metadata/scheduledevents"
INSTANCE_COMPUTE_PATH = "/metadata/instance/compute"
INSTANCE_API_VERSION = "2021-02-01"
GONE_RETRY_SECONDS = 70.0


class ImdsError(Exception):
    """A poll that gave no usable document. `kind` is a bounded metric label."""

    def __init__(self, kind: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


@dataclass(frozen=True)
class Fetch:
    document: Document
    attempts: int
    seconds: float


class ImdsClient:
    def __init__(
        self,
        *,
        base_url: str,
        api_version: str = "2020-07-01",
        timeout_seconds: float = 2.0,
        first_call_timeout_seconds: float = 120.0,
        max_body_bytes: int = 1 << 20,
        min_interval_seconds: float = 0.25,
        retry_budget_seconds: float = 5.0,
        max_retry_after_seconds: float = 3.0,
        backoff: Backoff | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._api_version = api_version
        self._timeout = timeout_seconds
        self._first_timeout = first_call_timeout_seconds
        self._max_body = max_body_bytes
        self._min_interval = min_interval_seconds
        self._retry_budget = retry_budget_seconds
        self._max_retry_after = max_retry_after_seconds
        self._backoff = backoff or Backoff(initial_seconds=0.2, max_seconds=2.0)
        self._clock = clock or SystemClock()
        self._lock = asyncio.Lock()
        self._last_request_at: float | None = None
        self.first_call_done = False
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ImdsClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # trust_env=False: IMDS must never be reached through a proxy.
            self._session = aiohttp.ClientSession(
                trust_env=False, headers={"Metadata": "true"}, auto_decompress=True
            )
        return self._session

    async def get_scheduled_events(self) -> Fetch:
        """One poll, with the retries the service asks for. Raises `ImdsError`."""
        timeout = self._timeout if self.first_call_done else self._first_timeout
        started = self._clock.monotonic()
        attempt = 0
        gone_since: float | None = None
        while True:
            attempt += 1
            # A timeout or a refused connection raises at once: the caller polls again next
            # tick, and a hung IMDS must not hold the loop.
            status, body, retry_after = await self._request(
                "GET", SCHEDULED_EVENTS_PATH, self._api_version, timeout=timeout
            )
            elapsed = self._clock.monotonic() - started
            if status == 200:
                try:
                    document = parse_document(body)
                except DocumentError as exc:
                    raise ImdsError("parse_error", str(exc), status=status) from None
                self.first_call_done = True
                return Fetch(document=document, attempts=attempt, seconds=elapsed)
            if status == 410:
                gone_since = gone_since if gone_since is not None else self._clock.monotonic()
                if self._clock.monotonic() - gone_since >= GONE_RETRY_SECONDS:
                    raise ImdsError("gone", "410 Gone for 70 seconds", status=status)
            elif status == 429 or status >= 500:
                if elapsed >= self._retry_budget:
                    kind = "rate_limited" if status == 429 else "http_error"
                    raise ImdsError(kind, f"HTTP {status} after {attempt} attempts", status=status)
            else:
                raise ImdsError("http_error", f"HTTP {status}: {_snippet(body)}", status=status)
            if retry_after is not None:
                retry_after = min(retry_after, self._max_retry_after)
            delay = self._backoff.delay(attempt, retry_after=retry_after)
            if status != 410:
                # The last retry lands at the end of the budget, not past it.
                delay = min(delay, max(0.0, self._retry_budget - elapsed))
            await self._clock.sleep(delay)

    async def acknowledge(self, event_ids: Sequence[str]) -> None:
        """POST StartRequests for the given events. Raises `ImdsError` unless 200."""
        body = json.dumps({"StartRequests": [{"EventId": event_id} for event_id in event_ids]})
        status, answer, _ = await self._request(
            "POST", SCHEDULED_EVENTS_PATH, self._api_version, timeout=self._timeout, body=body
        )
        if status != 200:
            raise ImdsError("ack_error", f"HTTP {status}: {_snippet(answer)}", status=status)

    async def vm_name(self) -> str:
        """The VM's name from instance metadata (`compute.name`), as Resources lists it."""
        status, body, _ = await self._request(
            "GET",
            INSTANCE_COMPUTE_PATH,
            INSTANCE_API_VERSION,
            timeout=self._timeout,
            extra_query={"format": "json"},
        )
        if status != 200:
            raise ImdsError("http_error", f"instance metadata HTTP {status}", status=status)
        try:
            data: Any = json.loads(body)
            name = data["name"]
        except (ValueError, KeyError, TypeError):
            raise ImdsError("parse_error", "instance metadata has no compute name") from None
        if not isinstance(name, str) or not name:
            raise ImdsError("parse_error", "instance metadata compute name is empty")
        return name

    async def _request(
        self,
        method: str,
        path: str,
        api_version: str,
        *,
        timeout: float,
        body: str | None = None,
        extra_query: dict[str, str] | None = None,
    ) -> tuple[int, bytes, float | None]:
        await self._pace()
        query = {"api-version": api_version, **(extra_query or {})}
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            async with self._get_session().request(
                method,
                self._base + path,
                params=query,
                data=body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
                allow_redirects=False,
            ) as response:
                payload = await _read_capped(response, self._max_body)
                retry_after = _retry_after(response.headers.get("Retry-After"))
                return response.status, payload, retry_after
        except TimeoutError:
            raise ImdsError("timeout", f"no answer within {timeout:g}s") from None
        except aiohttp.ClientError as exc:
            raise ImdsError("connection_error", f"{type(exc).__name__}: {exc}") from None

    async def _pace(self) -> None:
        """Keep request starts at least `min_interval` apart: IMDS allows 5 per second."""
        async with self._lock:
            now = self._clock.monotonic()
            if self._last_request_at is not None:
                wait = self._last_request_at + self._min_interval - now
                if wait > 0:
                    await self._clock.sleep(wait)
            self._last_request_at = self._clock.monotonic()


async def _read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise ImdsError("too_large", f"answer over {limit} bytes", status=response.status)
        chunks.append(chunk)
    return b"".join(chunks)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, min(float(value), 60.0))
    except ValueError:
        return None


def _snippet(body: bytes) -> str:
    return body[:200].decode("utf-8", errors="replace")
