"""The controller's requests on their way out: first the request budget, then, for a write, the
fence. The one place every request of the controller passes (informers' lists, the doctor's
reads, the executor's writes, Kubernetes Events, the webhook's certificate).

The order is the point: a write may wait long for its token (a drain of many pods at a low QPS),
and whether it may still be sent is decided when it leaves, after that wait
(`rebalancer.kube.fence`). Reads are not fenced; watches pass straight through.

The Lease's own requests do not come here (kube-controller-manager and kube-scheduler give
leader election a client of its own for the same reason): renewals never wait behind the writes
they protect, and are never fenced by the deadline they extend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from rebalancer.kube.client import Requester
from rebalancer.kube.fence import WriteFence
from rebalancer.kube.limiter import TokenBucket


class RequestGate:
    def __init__(
        self,
        client: Requester,
        *,
        limiter: TokenBucket | None,
        fence: WriteFence | None,
        timeout_seconds: float,
    ) -> None:
        self._client = client
        self.limiter = limiter
        self.fence = fence
        self._timeout = timeout_seconds

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
        limited: bool = True,
    ) -> Any:
        """`limited=False` bypasses the request budget (low-priority traffic with a budget of
        its own, such as Kubernetes Events); the fence applies to every write."""
        if limited and self.limiter is not None:
            await self.limiter.take()
        timeout = timeout_seconds or self._timeout
        if method != "GET" and self.fence is not None:
            timeout = self.fence.admit(timeout)  # raises Fenced: not sent
        return await self._client.request(
            method,
            path,
            body=body,
            content_type=content_type,
            query=query,
            timeout_seconds=timeout,
        )

    def stream(
        self, path: str, *, query: Mapping[str, str], timeout_seconds: float
    ) -> AsyncIterator[dict[str, Any]]:
        return self._client.stream(path, query=query, timeout_seconds=timeout_seconds)

    async def close(self) -> None:
        pass  # the connection is the client's, closed by whoever opened it
