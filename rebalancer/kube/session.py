"""One aiohttp session to the API server: the credentials on every request, nothing else.

What it is not: error handling or decoding (`client.py` does both, once).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp

from rebalancer.kube.credentials import Credentials


class Session:
    """One aiohttp session to the API server, with the credentials on every request."""

    def __init__(self, credentials: Credentials, user_agent: str) -> None:
        self._credentials = credentials
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    def _opened(self) -> aiohttp.ClientSession:
        # Made at the first request, inside the running loop, as aiohttp wants.
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._credentials.ssl or True),
                trust_env=True,  # HTTPS_PROXY / NO_PROXY, as kubectl honours them
                # A watch event can hold an object up to etcd's 1.5 MiB request limit.
                read_bufsize=2**21,
            )
        return self._session

    async def send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None,
        content_type: str,
        body: Any,
        timeout_seconds: float,
    ) -> aiohttp.ClientResponse:
        credentials = self._credentials
        headers = {
            "Accept": "application/json",
            "Content-Type": content_type,
            "User-Agent": self._user_agent,
        }
        if credentials.token is not None:
            headers["Authorization"] = credentials.token.header()
        return await self._opened().request(
            method,
            credentials.server + path,
            params=dict(query or {}),
            headers=headers,
            data=None if body is None else json.dumps(body),
            timeout=aiohttp.ClientTimeout(total=timeout_seconds),
            proxy=credentials.proxy,
            server_hostname=credentials.tls_server_name,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
