"""A webhook receiver on 127.0.0.1 that records what the controller's notifier POSTs, answers
with scripted statuses first, and lets a test await a notification instead of sleeping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

# Slack-like: the token is in the path, so a log line that had the URL would show it.
SECRET_PATH = "/services/T0001/B0001/not-to-be-logged-s3cr3t"


@dataclass
class Receiver:
    answers: list[int] = field(default_factory=list)  # statuses answered first, then 200
    retry_after: str | None = None  # sent with a 429
    bodies: list[dict[str, Any]] = field(default_factory=list)  # the JSON of 2xx answers
    requests: int = 0
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(SECRET_PATH, self._post)
        return app

    async def _post(self, request: web.Request) -> web.Response:
        self.requests += 1
        body = json.loads(await request.read())
        if self.answers:
            status = self.answers.pop(0)
            headers = (
                {"Retry-After": self.retry_after} if status == 429 and self.retry_after else {}
            )
            self._arrived.set()
            return web.Response(status=status, headers=headers, text="no")
        self.bodies.append(body)
        self._arrived.set()
        return web.Response(status=200, text="ok")

    async def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], Any], *, timeout: float, what: str
    ) -> Any:
        """The first truthy `predicate(bodies)`, awaited on each arrival."""
        try:
            async with asyncio.timeout(timeout):
                while not (found := predicate(self.bodies)):
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            raise AssertionError(f"no {what} within {timeout}s; received {self.bodies}") from None
        return found
