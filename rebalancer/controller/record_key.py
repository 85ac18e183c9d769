"""The key that seals our records (seal.py): a Secret `<lease>-records` in the controller's
namespace, readable by the controller alone (the chart's Role names it).

The first leader creates it with 32 random bytes; every replica reads it before its first
planning pass, and plans nothing without it (a record it cannot check is one it must not obey).
A dry run that finds no Secret uses a key of its own for the run: it writes no records.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from rebalancer.controller.seal import KEY_BYTES, Sealer
from rebalancer.kube.errors import Conflict, KubeError
from rebalancer.kube.writes import Writer

DATA_KEY = "key"
# Before the key is read, no record verifies: a view built then (the plugin's, a test's) shows
# every workload with a record of ours as left alone. The controller plans nothing until then.
UNLOADED = Sealer(secrets.token_bytes(KEY_BYTES))


def key_of(secret: dict[str, Any]) -> bytes:
    """ValueError for a Secret without a usable key."""
    text = (secret.get("data") or {}).get(DATA_KEY)
    if not isinstance(text, str):
        raise ValueError(f"no data.{DATA_KEY}")
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"data.{DATA_KEY} is not base64") from None
    if len(key) < KEY_BYTES:
        raise ValueError(f"data.{DATA_KEY} has fewer than {KEY_BYTES} bytes")
    return key


class RecordKey:
    def __init__(
        self,
        writer: Writer,
        *,
        namespace: str,
        secret: str,
        may_write: Callable[[], bool],
        dry_run: bool,
        sleep: Callable[[float], Awaitable[None]],
        log: Any,
    ) -> None:
        self._writer = writer
        self._namespace, self._secret = namespace, secret
        self._path = f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets/{quote(secret)}"
        self._may_write = may_write
        self._dry_run = dry_run
        self._sleep = sleep
        self._log = log
        self._sealer: Sealer | None = None

    @property
    def sealer(self) -> Sealer:
        if self._sealer is None:
            raise RuntimeError("the record key is not loaded yet")
        return self._sealer

    @property
    def loaded(self) -> bool:
        return self._sealer is not None

    async def load(self, stop: asyncio.Event, retry_seconds: float = 2.0) -> None:
        """Read the key (the leader creates it if there is none); try again until there is one
        or `stop` is set."""
        while not stop.is_set() and self._sealer is None:
            try:
                key = await self._read_or_create()
            except (KubeError, ValueError) as error:
                self._log.warning("record key not loaded; retrying", secret=self._secret,
                                  error=str(error))  # fmt: skip
                key = None
            if key is not None:
                self._sealer = Sealer(key)
                self._log.info("record key loaded", secret=self._secret)
                return
            await self._sleep(retry_seconds)

    async def _read_or_create(self) -> bytes | None:
        secret = await self._writer.get(self._path)
        if secret is not None:
            return key_of(secret)
        if self._dry_run:
            return secrets.token_bytes(KEY_BYTES)
        if not self._may_write():
            return None  # the leader creates it
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": self._secret, "namespace": self._namespace},
            "data": {DATA_KEY: base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()},
        }
        collection = f"/api/v1/namespaces/{quote(self._namespace, safe='')}/secrets"
        with contextlib.suppress(Conflict):  # another replica created it first: read theirs
            await self._writer.create(collection, body)
        secret = await self._writer.get(self._path)
        return key_of(secret) if secret is not None else None
