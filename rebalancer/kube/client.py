"""A thin JSON client over aiohttp: one session per process, answers as raw JSON.

Credentials (in-cluster or a kubeconfig) come from `credentials.py`; answers stay raw JSON (small
and fast to read, never generated models) and every error is translated once, in `request`. No
request budget and no fence here: the controller's requests pass `rebalancer.kube.gate.RequestGate`
on their way.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import aiohttp

from rebalancer import __version__
from rebalancer.kube.credentials import Credentials, from_kubeconfig, in_cluster
from rebalancer.kube.errors import KubeError, Unavailable, from_response
from rebalancer.kube.session import Session

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class Requester(Protocol):
    """What `KubeClient` offers to the code above it (and what the tests' fake API offers)."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
    ) -> Any: ...

    def stream(
        self, path: str, *, query: Mapping[str, str], timeout_seconds: float
    ) -> AsyncIterator[dict[str, Any]]: ...


class KubeClient:
    def __init__(self, api_client: Any, *, timeout_seconds: float = 10.0) -> None:
        self._api = api_client
        self._timeout = timeout_seconds

    @classmethod
    async def connect(
        cls,
        kubeconfig: str | None = None,
        *,
        context: str | None = None,
        timeout_seconds: float = 10.0,
        user_agent: str = "",
    ) -> KubeClient:
        """In-cluster credentials in a pod, else the kubeconfig given or $KUBECONFIG (its
        `context`, or its current one).

        `user_agent` names the caller in the API server's audit log (client-go sends
        `<binary>/<version>`; we add the component and the replica's identity, so the writes of
        two controller replicas can be told apart)."""
        if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            credentials = in_cluster()
        else:
            credentials = await from_kubeconfig(kubeconfig, context)
        return cls.over(credentials, timeout_seconds=timeout_seconds, user_agent=user_agent)

    @classmethod
    def over(
        cls,
        credentials: Credentials,
        *,
        timeout_seconds: float = 10.0,
        user_agent: str = "",
    ) -> KubeClient:
        session = Session(credentials, user_agent or f"spot-rebalancer/{__version__}")
        return cls(session, timeout_seconds=timeout_seconds)

    async def close(self) -> None:
        await self._api.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
        timeout_seconds: float | None = None,
    ) -> Any:
        """One API call; returns the decoded JSON answer or raises a `KubeError`."""
        response = await self._send(method, path, body, content_type, query, timeout_seconds)
        try:
            payload = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Unavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        finally:
            response.release()
        if not 200 <= response.status < 300:
            raise from_response(response.status, payload, response.headers)
        if not payload:
            return {}
        try:
            return json.loads(payload)
        except ValueError:
            raise KubeError(f"{method} {path}: not JSON", status=response.status) from None

    async def stream(
        self,
        path: str,
        *,
        query: Mapping[str, str],
        timeout_seconds: float,
    ) -> AsyncIterator[dict[str, Any]]:
        """A watch: yields each event object ({"type", "object"}) until the server ends it."""
        response = await self._send("GET", path, None, "application/json", query, timeout_seconds)
        try:
            if not 200 <= response.status < 300:
                raise from_response(response.status, await response.read(), response.headers)
            async for line in response.content:
                if line.strip():
                    try:
                        yield json.loads(line)
                    except ValueError:
                        continue  # a torn line at disconnect; the watch resumes from its rv
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Unavailable(f"watch {path}: {type(exc).__name__}: {exc}") from None
        finally:
            response.release()

    async def _send(
        self,
        method: str,
        path: str,
        body: Any,
        content_type: str,
        query: Mapping[str, str] | None,
        timeout_seconds: float | None,
    ) -> Any:
        try:
            return await self._api.send(
                method,
                path,
                query=query,
                content_type=content_type,
                body=body,
                timeout_seconds=timeout_seconds or self._timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise Unavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from None
