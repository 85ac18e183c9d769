"""Emulators of the Azure APIs behind the risk model, for tests and demos (aiohttp apps on
127.0.0.1); not used by the controller itself.

- `TokenEmulator`: Microsoft Entra's token endpoint as Workload Identity uses it,
  `POST /{tenant}/oauth2/v2.0/token` with a client assertion (the projected ServiceAccount
  token), answering `{"token_type", "expires_in", "access_token"}`. azure-identity accepts only an
  https authority, so it is served with `self_signed_tls` (a certificate for 127.0.0.1).
- `ArmEmulator`: Resource Graph (`POST /providers/Microsoft.ResourceGraph/resources`, the
  eviction-rate query's `in~` lists, pages linked by `$skipToken`, the per-user quota headers)
  and the Spot Placement Score API (`.../placementScores/spot/generate`, its 8-region and 5-size
  limits, zonal scores, `DataNotFoundOrStale` for what it was not told). It accepts only tokens
  the `TokenEmulator` issued and has not expired.
Faults, for the next requests (`Fault`): an HTTP status (with `Retry-After`), a slow answer, a
broken body, an expired token (401 `ExpiredAuthenticationToken`), a refused client assertion
(Entra's AADSTS700024: the federated token expired).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from rebalancer.azure.placement_scores import MAX_REGIONS, MAX_SIZES
from rebalancer.azure.resource_graph import API_VERSION as GRAPH_API_VERSION
from rebalancer.azure.resource_graph import PATH as GRAPH_PATH

PLACEMENT_API_VERSION = "2025-06-05"
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


@dataclass
class Fault:
    """What the next `count` matching requests get. kind: `status` (with `retry_after`),
    `slow` (`seconds`, then a normal answer), `garbage`, `expired_token` (ARM: 401),
    `expired_assertion` (token endpoint: 400 AADSTS700024). `path` filters by path prefix."""

    kind: str
    status: int = 500
    retry_after: str | None = None
    seconds: float = 0.0
    count: int = 1
    path: str = ""


@dataclass
class _Faults:
    faults: list[Fault] = field(default_factory=list)

    def take(self, path: str) -> Fault | None:
        for fault in self.faults:
            if path.startswith(fault.path):
                fault.count -= 1
                if fault.count <= 0:
                    self.faults.remove(fault)
                return fault
        return None


async def _apply(fault: Fault | None) -> web.Response | None:
    """The answer a fault gives, or None to answer normally (after a delay for `slow`)."""
    if fault is None:
        return None
    if fault.kind == "slow":
        await asyncio.sleep(fault.seconds)
        return None
    if fault.kind == "garbage":
        return web.Response(text='{"data": [', content_type="application/json")
    if fault.kind == "expired_token":
        return _arm_error(401, "ExpiredAuthenticationToken", "The access token expiry UTC time "
                          "is earlier than current UTC time.")  # fmt: skip
    if fault.kind == "expired_assertion":
        return web.json_response(
            {
                "error": "invalid_client",
                "error_description": "AADSTS700024: Client assertion is not within its valid "
                "time range.",
                "error_codes": [700024],
            },
            status=400,
        )
    headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
    return _arm_error(fault.status, "Injected", "injected fault", headers=headers)


def _arm_error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    return web.json_response(
        {"error": {"code": code, "message": message}}, status=status, headers=headers
    )


@dataclass
class TokenEmulator:
    tenant_id: str = "00000000-0000-0000-0000-000000000001"
    client_id: str = "00000000-0000-0000-0000-000000000002"
    expires_in: int = 3600
    faults: list[Fault] = field(default_factory=list)
    issued: dict[str, float] = field(default_factory=dict)  # token -> expiry (time.time())
    requests: int = 0
    assertions: list[str] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)
        return app

    def expire_all(self) -> None:
        """Every token issued so far is expired from now on (as if time had passed)."""
        for token in self.issued:
            self.issued[token] = 0.0

    def valid(self, token: str) -> bool:
        return self.issued.get(token, 0.0) > time.time()

    async def _token(self, request: web.Request) -> web.Response:
        self.requests += 1
        answer = await _apply(_Faults(self.faults).take(request.path))
        if answer is not None:
            return answer
        form = await request.post()
        if request.match_info["tenant"] != self.tenant_id or form.get("client_id") != (
            self.client_id
        ):
            return web.json_response(
                {"error": "unauthorized_client", "error_description": "AADSTS700016"}, status=400
            )
        if (
            form.get("grant_type") != "client_credentials"
            or form.get("client_assertion_type") != JWT_BEARER
            or not form.get("client_assertion")
            or form.get("scope") != "https://management.azure.com/.default"
        ):
            return web.json_response({"error": "invalid_request"}, status=400)
        self.assertions.append(str(form.get("client_assertion")))
        token = f"token-{self.requests}-{time.monotonic_ns()}"
        self.issued[token] = time.time() + self.expires_in
        return web.json_response(
            {"token_type": "Bearer", "expires_in": self.expires_in, "access_token": token}
        )


@dataclass
class ArmEmulator:
    tokens: TokenEmulator
    subscription_id: str = "00000000-0000-0000-0000-00000000000a"
    # Resource Graph: bucket strings by (sku, region), lower case, as Azure would spell them.
    eviction_rates: dict[tuple[str, str], str] = field(default_factory=dict)
    # Placement scores by (sku, region, zone "1".."3"), lower case; the rest DataNotFoundOrStale.
    placement_scores: dict[tuple[str, str, str], str] = field(default_factory=dict)
    page_size: int = 1000
    quota: int | None = None  # requests per quota window; None: unlimited
    quota_window_seconds: float = 5.0
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    monotonic: Callable[[], float] = time.monotonic  # the quota window's clock
    _spent: int = 0
    _window_start: float = 0.0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(GRAPH_PATH, self._graph)
        app.router.add_post(
            "/subscriptions/{sub}/providers/Microsoft.Compute/locations/{location}"
            "/placementScores/spot/generate",
            self._placement,
        )
        return app

    async def _admit(self, request: web.Request, api_version: str) -> web.Response | None:
        """Faults, the token and the api-version, the quota; None when the call may go on."""
        answer = await _apply(_Faults(self.faults).take(request.path))
        if answer is not None:
            return answer
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ")
        if not header.startswith("Bearer ") or token not in self.tokens.issued:
            return _arm_error(401, "InvalidAuthenticationToken", "The access token is invalid.")
        if not self.tokens.valid(token):
            return _arm_error(401, "ExpiredAuthenticationToken", "The access token expired.")
        if request.query.get("api-version") != api_version:
            return _arm_error(400, "InvalidApiVersionParameter", "unsupported api-version")
        if self.quota is not None:
            now = self.monotonic()
            if now - self._window_start >= self.quota_window_seconds:
                self._window_start, self._spent = now, 0
            if self._spent >= self.quota:
                return _arm_error(
                    429, "RateLimiting", "quota spent", headers=self._quota_headers(now)
                )
            self._spent += 1
        return None

    def _quota_headers(self, now: float) -> dict[str, str]:
        if self.quota is None:
            return {}
        left = max(0.0, self.quota_window_seconds - (now - self._window_start))
        return {
            "x-ms-user-quota-remaining": str(max(0, self.quota - self._spent)),
            "x-ms-user-quota-resets-after": str(dt.timedelta(seconds=round(left, 3))).zfill(8),
        }

    async def _graph(self, request: web.Request) -> web.Response:
        refused = await self._admit(request, GRAPH_API_VERSION)
        if refused is not None:
            return refused
        body = await request.json()
        self.requests.append((request.path, body))
        query = str(body.get("query", ""))
        if "SpotResources" not in query or "skuspotevictionrate" not in query:
            return _arm_error(400, "BadRequest", "this emulator answers the eviction-rate query")
        skus, regions = (set(_in_list(query, name)) for name in ("sku.name", "location"))
        rows = [
            {"skuName": sku, "location": region, "spotEvictionRate": rate}
            for (sku, region), rate in sorted(self.eviction_rates.items())
            if sku in skus and region in regions
        ]
        options = body.get("options") or {}
        top = min(int(options.get("$top", 1000)), 1000, self.page_size)
        token = options.get("$skipToken")
        skip = int(base64.b64decode(token).decode()) if token else 0
        page = rows[skip : skip + top]
        answer: dict[str, Any] = {
            "totalRecords": len(rows),
            "count": len(page),
            "resultTruncated": "false",
            "facets": [],
            "data": page,
        }
        if skip + top < len(rows):
            answer["$skipToken"] = base64.b64encode(str(skip + top).encode()).decode()
        return web.json_response(answer, headers=self._quota_headers(self.monotonic()))

    async def _placement(self, request: web.Request) -> web.Response:
        refused = await self._admit(request, PLACEMENT_API_VERSION)
        if refused is not None:
            return refused
        if request.match_info["sub"] != self.subscription_id:
            return _arm_error(404, "SubscriptionNotFound", "no such subscription")
        body = await request.json()
        self.requests.append((request.path, body))
        regions = body.get("desiredLocations") or []
        sizes = [s.get("sku", "") for s in body.get("desiredSizes") or []]
        if not regions or not sizes or len(regions) > MAX_REGIONS or len(sizes) > MAX_SIZES:
            return _arm_error(400, "InvalidParameter", "1-8 locations and 1-5 sizes")
        zonal = body.get("availabilityZones") is True
        scores = []
        for region in regions:
            for sku in sizes:
                for zone in ("1", "2", "3") if zonal else ("",):
                    key = (sku.lower(), region.lower(), zone)
                    entry = {
                        "sku": sku,
                        "region": region,
                        "score": self.placement_scores.get(key, "DataNotFoundOrStale"),
                        "isQuotaAvailable": True,
                    }
                    if zone:
                        entry["availabilityZone"] = zone
                    scores.append(entry)
        return web.json_response({**body, "placementScores": scores})


def _in_list(query: str, name: str) -> list[str]:
    match = re.search(rf"{re.escape(name)} in~ \(([^)]*)\)", query)
    return re.findall(r"'([^']*)'", match.group(1)) if match else []


def self_signed_tls(folder: Path) -> tuple[ssl.SSLContext, Path]:
    """A server TLS context for 127.0.0.1 and the certificate file a client trusts."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "emulator.crt", folder / "emulator.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file
