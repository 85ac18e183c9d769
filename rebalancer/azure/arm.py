"""Calls to Azure Resource Manager: a bearer token from Azure Workload Identity, a JSON POST, and
Azure's throttling rules. Used by the Resource Graph and Spot Placement Score clients.

Tokens: `azure-identity`'s `WorkloadIdentityCredential` (async), as AKS workloads authenticate:
the workload identity webhook gives the pod AZURE_CLIENT_ID, AZURE_TENANT_ID,
AZURE_FEDERATED_TOKEN_FILE and AZURE_AUTHORITY_HOST, and the credential trades the projected
ServiceAccount token for an Entra token for `https://management.azure.com/.default` (it caches
and renews it). No secret anywhere. `DefaultAzureCredential` is there for a controller run
outside a cluster (an `az login` on a laptop).

Throttling: a 429's `Retry-After` (or `x-ms-user-quota-resets-after`) is waited out here when it
is short (`max_wait_seconds`), else the call fails with the wait in the error, and the caller's
next try comes no sooner. When an answer says `x-ms-user-quota-remaining: 0`, the next call waits
for the quota to reset instead of spending a request on a certain 429. A 401 (a token that Azure
says is expired or invalid: clock skew, a revoked token) gets one fresh token and one more try.
Every other failure raises `AzureApiError` with a bounded `reason` (a metric label).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal, Protocol

import aiohttp

from rebalancer.clock import Clock, SystemClock
from rebalancer.retry import Backoff

ARM_URL = "https://management.azure.com"
ARM_SCOPE = "https://management.azure.com/.default"
# Why a refresh failed: the `reason` label of rebalancer_risk_refresh_errors_total.
REASONS = ("throttled", "auth", "timeout", "connection", "http_error", "parse", "empty")
Credential = Literal["workload-identity", "default"]


class AzureApiError(Exception):
    def __init__(self, message: str, *, reason: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


class TokenSource(Protocol):
    async def token(self) -> str: ...

    def invalidate(self) -> None:
        """Forget the cached token: the next `token()` asks for a new one."""
        ...

    async def close(self) -> None: ...


class AzureIdentityToken:
    """Tokens for ARM from an azure-identity async credential, made by `make_credential`."""

    def __init__(self, make_credential: Callable[[], Any], scope: str = ARM_SCOPE) -> None:
        self._make = make_credential
        self._scope = scope
        self._credential: Any = None
        self._retired: list[Any] = []
        # One request for a token at a time: the feeds start together, and the credential does
        # not merge concurrent requests (each would go to Entra).
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        async with self._lock:
            return await self._token()

    async def _token(self) -> str:
        from azure.core.exceptions import AzureError

        try:
            if self._credential is None:
                self._credential = self._make()
            access = await self._credential.get_token(self._scope)
        except (AzureError, ValueError, OSError) as error:
            # ClientAuthenticationError (Entra refused the federated token: expired, wrong
            # audience, no federated credential), CredentialUnavailableError (no configuration),
            # a token file that cannot be read.
            raise AzureApiError(
                f"no token: {type(error).__name__}: {_first_line(error)}", reason="auth"
            ) from None
        return str(access.token)

    def invalidate(self) -> None:
        if self._credential is not None:
            self._retired.append(self._credential)  # closed in close(): this is not async
        self._credential = None

    async def close(self) -> None:
        for credential in [*self._retired, self._credential]:
            if credential is not None:
                await credential.close()
        self._retired, self._credential = [], None


def identity_token(kind: Credential = "workload-identity", **options: Any) -> AzureIdentityToken:
    """Tokens from Workload Identity (configured by the webhook's environment variables), or from
    `DefaultAzureCredential`; `options` go to the credential (tests: `authority`,
    `connection_verify`, `tenant_id`, `client_id`, `token_file_path`)."""

    def make() -> Any:
        from azure.identity.aio import DefaultAzureCredential, WorkloadIdentityCredential

        if kind == "default":
            return DefaultAzureCredential(**options)
        return WorkloadIdentityCredential(**options)

    return AzureIdentityToken(make)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:300]


def retry_after_seconds(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """`Retry-After` (seconds or an HTTP date, counted from `now`), else
    `x-ms-user-quota-resets-after` (hh:mm:ss)."""
    text = headers.get("Retry-After", "").strip()
    if text:
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return float(text)
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    return quota_reset_seconds(headers)


def quota_reset_seconds(headers: Mapping[str, str]) -> float | None:
    match = re.fullmatch(
        r"(\d+):(\d{2}):(\d{2}(?:\.\d+)?)", headers.get("x-ms-user-quota-resets-after", "").strip()
    )
    if match is None:
        return None
    return int(match.group(1)) * 3600 + int(match.group(2)) * 60 + float(match.group(3))


@dataclass
class ArmClient:
    """POST JSON to ARM with a bearer token; see the module doc for throttling and 401s."""

    tokens: TokenSource
    base_url: str = ARM_URL
    timeout_seconds: float = 30.0
    max_wait_seconds: float = 10.0  # the longest Retry-After waited out inside one call
    attempts: int = 3
    backoff: Backoff = field(default_factory=lambda: Backoff(initial_seconds=2.0, max_seconds=10.0))
    clock: Clock = field(default_factory=SystemClock)
    session: aiohttp.ClientSession | None = None
    requests: int = field(default=0, init=False)
    _quota_reset_at: float | None = field(default=None, init=False)  # monotonic seconds

    async def post(self, path: str, body: Mapping[str, Any], *, api_version: str) -> dict[str, Any]:
        own = self.session is None
        session = self.session or aiohttp.ClientSession()
        try:
            return await self._post(session, path, body, api_version)
        finally:
            if own:
                await session.close()

    async def _post(
        self,
        session: aiohttp.ClientSession,
        path: str,
        body: Mapping[str, Any],
        api_version: str,
    ) -> dict[str, Any]:
        url = f"{self.base_url.rstrip('/')}{path}?api-version={api_version}"
        fresh_token = False
        attempt = 0
        while True:
            attempt += 1
            await self._wait_for_quota()
            token = await self.tokens.token()
            status, headers, text = await self._send(session, url, body, token)
            self._note_quota(headers)
            if status == 200:
                return _json_object(text)
            if status == 401 and not fresh_token:
                self.tokens.invalidate()  # Azure says no: one new token, one more try
                fresh_token = True
                continue
            code = _error_code(text)
            if status == 429:
                wait = retry_after_seconds(headers, self.clock.now())
                if wait is not None and wait <= self.max_wait_seconds and attempt < self.attempts:
                    await self.clock.sleep(wait)
                    continue
                raise AzureApiError(
                    f"throttled (HTTP 429 {code}), retry after {wait}s",
                    reason="throttled",
                    retry_after=wait,
                )
            if status in (401, 403):
                raise AzureApiError(f"HTTP {status} {code}", reason="auth")
            if status >= 500 and attempt < self.attempts:
                await self.clock.sleep(self.backoff.delay(attempt))
                continue
            raise AzureApiError(f"HTTP {status} {code}", reason="http_error")

    async def _send(
        self, session: aiohttp.ClientSession, url: str, body: Mapping[str, Any], token: str
    ) -> tuple[int, Mapping[str, str], str]:
        self.requests += 1
        try:
            async with session.post(
                url,
                json=body,
                headers={"Authorization": f"Bearer {token}"},
                timeout=aiohttp.ClientTimeout(total=self.timeout_seconds),
            ) as response:
                return response.status, response.headers, await response.text()
        except TimeoutError:
            raise AzureApiError(
                f"no answer within {self.timeout_seconds}s", reason="timeout"
            ) from None
        except aiohttp.ClientError as error:
            raise AzureApiError(
                f"{type(error).__name__}: {_first_line(error)}", reason="connection"
            ) from None

    async def _wait_for_quota(self) -> None:
        if self._quota_reset_at is None:
            return
        wait = self._quota_reset_at - self.clock.monotonic()
        self._quota_reset_at = None
        if wait <= 0:
            return
        if wait > self.max_wait_seconds:
            raise AzureApiError(
                f"quota spent; it resets in {wait:.0f}s", reason="throttled", retry_after=wait
            )
        await self.clock.sleep(wait)

    def _note_quota(self, headers: Mapping[str, str]) -> None:
        if headers.get("x-ms-user-quota-remaining", "").strip() == "0":
            reset = quota_reset_seconds(headers)
            if reset is not None:
                self._quota_reset_at = self.clock.monotonic() + reset


def _json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise AzureApiError(f"not JSON: {error}", reason="parse") from None
    if not isinstance(data, dict):
        raise AzureApiError("not a JSON object", reason="parse")
    return data


def _error_code(text: str) -> str:
    """ARM's `{"error": {"code": ...}}`, or nothing."""
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return ""
    code = error.get("code") if isinstance(error, dict) else None
    return str(code)[:100] if code else ""
