"""The admission webhook's TLS: a CA and a serving certificate kept in a Secret, and the CA in the
MutatingWebhookConfiguration's caBundle.

Two ways, as the chart's `controller.webhook.certManager` says:
- ours (default): the leader issues a CA and a certificate for the Service's DNS names (a year,
  renewed 30 days before the end, or at once if the Secret is missing, unreadable, or made for
  other names), writes the Secret, and puts the CA in every webhook of the configuration;
- cert-manager: it writes the Secret and injects the CA; we only read.
Every replica reads the Secret (both serve the webhook) and loads a changed one into the running
server: a rotation needs no restart.

Everything here fails soft: a Secret we cannot read or write leaves the last good certificate in
use and is said in the log; the API server's `failurePolicy: Ignore` keeps pods flowing meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import os
import ssl
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rebalancer.kube.errors import Conflict, KubeError
from rebalancer.kube.writes import Writer

VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
CA_KEY, CERT_KEY, KEY_KEY = "ca.crt", "tls.crt", "tls.key"


@dataclass(frozen=True)
class Material:
    ca: bytes  # PEM
    cert: bytes
    key: bytes

    def to_secret_data(self) -> dict[str, str]:
        return {
            CA_KEY: base64.b64encode(self.ca).decode(),
            CERT_KEY: base64.b64encode(self.cert).decode(),
            KEY_KEY: base64.b64encode(self.key).decode(),
        }

    @classmethod
    def from_secret(cls, secret: dict[str, Any]) -> Material:
        """ValueError for a Secret without the three keys (cert-manager writes all three)."""
        data = secret.get("data") or {}
        try:
            ca, cert, key = (
                base64.b64decode(data[k], validate=True) for k in (CA_KEY, CERT_KEY, KEY_KEY)
            )
            return cls(ca, cert, key)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"missing or not base64: {error}") from None


def service_names(service: str, namespace: str) -> list[str]:
    """The names the API server may verify: it dials `<service>.<namespace>.svc`."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


_CA_USAGE = x509.KeyUsage(
    digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
    key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
    decipher_only=False,
)  # fmt: skip


def issue(dns_names: Sequence[str], now: dt.datetime) -> Material:
    """A new CA (ECDSA P-256) and a serving certificate it signs, both valid for VALIDITY."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "spot-rebalancer webhook CA")])
    start, end = now - dt.timedelta(minutes=5), now + VALIDITY
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return Material(
        ca=ca.public_bytes(pem),
        cert=cert.public_bytes(pem),
        key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def needs_renewal(material: Material, dns_names: Sequence[str], now: dt.datetime) -> str:
    """Why the material must be issued anew ("" if it serves): unreadable, expiring, other names."""
    try:
        cert = x509.load_pem_x509_certificate(material.cert)
        x509.load_pem_x509_certificate(material.ca)
    except ValueError:
        return "the certificate is not PEM"
    if cert.not_valid_after_utc - RENEW_BEFORE <= now:
        return f"the certificate ends {cert.not_valid_after_utc.isoformat()}"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        covered = set(sans.value.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        covered = set()
    if not set(dns_names) <= covered:
        return "the certificate is for other names"
    return ""


def server_context(material: Material) -> ssl.SSLContext:
    """A TLS server context with the material (ssl loads a chain from files only: a private
    temporary directory, removed at once)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    load_into(context, material)
    return context


def load_into(context: ssl.SSLContext, material: Material) -> None:
    """(Re)load a certificate into a live context: new handshakes use it."""
    with tempfile.TemporaryDirectory(prefix="webhook-tls-") as directory:
        cert_path, key_path = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
        for path, data in ((cert_path, material.cert), (key_path, material.key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(data)
        context.load_cert_chain(cert_path, key_path)


class TlsKeeper:
    """Reads (and, on the leader with our own certificates, issues) the webhook's TLS material."""

    def __init__(
        self,
        writer: Writer,
        *,
        namespace: str,
        secret: str,
        configuration: str,
        dns_names: Sequence[str],
        manage: bool,
        may_write: Callable[[], bool],
        now: Callable[[], dt.datetime],
        log: Any,
        on_error: Callable[[str], None] = lambda _: None,
    ) -> None:
        self._writer = writer
        self._secret_path = f"/api/v1/namespaces/{namespace}/secrets/{secret}"
        self._secrets_path = f"/api/v1/namespaces/{namespace}/secrets"
        self._namespace, self._secret = namespace, secret
        self._config_path = (
            f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{configuration}"
        )
        self._dns_names = list(dns_names)
        self._manage = manage
        self._may_write = may_write
        self._now = now
        self._log = log
        self._on_error = on_error
        self.material: Material | None = None
        self.loaded = asyncio.Event()

    async def check(self) -> bool:
        """One round: read, issue if ours and needed, inject the CA. True: new material."""
        try:
            secret = await self._writer.get(self._secret_path)
            material, why = self._read(secret)
            if why and self._manage and self._may_write():
                material = await self._issue(secret, why)
            if material is not None and self._manage and self._may_write():
                await self._inject(material.ca)
        except (TimeoutError, KubeError, OSError) as error:
            self._on_error("api")
            self._log.warning("webhook TLS: cannot read or write", error=str(error))
            return False
        if material is None or material == self.material:
            return False
        self.material = material
        self.loaded.set()
        return True

    def _read(self, secret: dict[str, Any] | None) -> tuple[Material | None, str]:
        if secret is None:
            return None, "no Secret"
        try:
            material = Material.from_secret(secret)
        except ValueError as error:
            self._on_error("unreadable")
            return None, f"the Secret is unreadable ({error})"
        why = needs_renewal(material, self._dns_names, self._now())
        if why and not self._manage:
            self._on_error("expiring")
            self._log.warning("webhook TLS: cert-manager's certificate does not serve", why=why)
        return material, why

    async def _issue(self, secret: dict[str, Any] | None, why: str) -> Material:
        material = issue(self._dns_names, self._now())
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": self._secret, "namespace": self._namespace},
            "data": material.to_secret_data(),
        }
        if secret is None:
            await self._writer.create(self._secrets_path, body)
        else:
            body["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]
            await self._writer.put(self._secret_path, body)
        self._log.info("webhook TLS: issued a certificate", why=why, names=self._dns_names)
        return material

    async def _inject(self, ca: bytes) -> None:
        config = await self._writer.get(self._config_path)
        if config is None:
            self._on_error("no_configuration")
            self._log.warning("webhook TLS: no MutatingWebhookConfiguration to put the CA in")
            return
        bundle = base64.b64encode(ca).decode()
        hooks = config.get("webhooks") or []
        if all((h.get("clientConfig") or {}).get("caBundle") == bundle for h in hooks):
            return
        for hook in hooks:
            hook.setdefault("clientConfig", {})["caBundle"] = bundle
        with contextlib.suppress(Conflict):  # changed meanwhile: the next round puts it in
            await self._writer.put(self._config_path, config)
            self._log.info("webhook TLS: CA put in the webhook configuration")

    async def run(self, stop: asyncio.Event, interval: float, reload: Callable[[], None]) -> None:
        while not stop.is_set():
            if await self.check():
                reload()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
