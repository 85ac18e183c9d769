"""Throwaway TLS material for tests: a CA and the serving certificates it signs.

For servers that a client verifies the way kube-apiserver verifies an admission webhook (the
CA's PEM as the only trust root, the certificate's names checked), e.g. a webhook on 127.0.0.1
that claims to be `<service>.<namespace>.svc`. Keys and certificates live a day.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class ThrowawayCA:
    def __init__(self, name: str = "spot-rebalancer test CA") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        """The CA certificate: what a webhook configuration's caBundle holds (base64 of it)."""
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(
        self, dns_names: Sequence[str], ip_addresses: Sequence[str] = ()
    ) -> tuple[bytes, bytes]:
        """A serving certificate for these names and its key, both PEM."""
        names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        subject = dns_names[0] if dns_names else ip_addresses[0]
        return self._sign(subject, ExtendedKeyUsageOID.SERVER_AUTH, names)

    def issue_client(self, user: str) -> tuple[bytes, bytes]:
        """A client certificate (the user in its CN, as kube-apiserver reads it) and its key."""
        return self._sign(user, ExtendedKeyUsageOID.CLIENT_AUTH, [])

    def _sign(
        self, subject: str, usage: x509.ObjectIdentifier, names: list[x509.GeneralName]
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = (
            builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        return certificate.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    def write(
        self, folder: Path, dns_names: Sequence[str], ip_addresses: Sequence[str] = ()
    ) -> tuple[Path, Path]:
        """Issue a serving certificate into `folder` (tls.crt, tls.key): for a process that
        serves it, as a webhook's Secret would be mounted."""
        certificate, key = self.issue(dns_names, ip_addresses)
        cert_file, key_file = folder / "tls.crt", folder / "tls.key"
        cert_file.write_bytes(certificate)
        key_file.write_bytes(key)
        return cert_file, key_file

    def server_context(
        self, dns_names: Sequence[str], ip_addresses: Sequence[str] = ()
    ) -> ssl.SSLContext:
        """A server TLS context with a certificate this CA issued for these names."""
        with tempfile.TemporaryDirectory(prefix="tls-") as folder:
            cert_file, key_file = self.write(Path(folder), dns_names, ip_addresses)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert_file, key_file)
        return context
