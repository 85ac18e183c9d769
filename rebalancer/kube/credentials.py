"""Where the API server is and how to prove who we are: in-cluster, or from a kubeconfig.

Why not kubernetes_asyncio's loaders for everything: importing any part of kubernetes_asyncio
imports its whole generated client (every API class and model, about 37 MB of RSS), and the
agent, one per spot node, needs none of it. The two cases a pod and our tests use are read here:
the pod's service account (token re-read when kubelet rotates it), and a kubeconfig whose user
has a token, a token file, a client certificate or a username and password. Whatever needs a
program to run or a provider to ask (`exec`, `auth-provider`: kubelogin, OIDC, gcp) and a
`$KUBECONFIG` that lists several files to merge go to kubernetes_asyncio, imported only then,
so a user's kubectl setup keeps working in the plugin.

What this is not: an HTTP client (`client.py` sends), or a second kubeconfig implementation
beyond the fields above.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = "~/.kube/config"
# User fields only kubernetes_asyncio knows how to turn into a token.
DELEGATED_USER_FIELDS = ("exec", "auth-provider")


class KubeConfigError(ValueError):
    """Credentials that cannot be loaded; the message says which and why."""


class Token(Protocol):
    def header(self) -> str:
        """The Authorization header's value."""


@dataclass(frozen=True)
class FixedToken:
    value: str  # "Bearer <token>" or "Basic <base64>"

    def header(self) -> str:
        return self.value


class TokenFile:
    """A bearer token in a file that may be replaced while we run: kubelet rotates a projected
    service-account token (about hourly) by swapping a symlink, so the file is read again when
    its inode or mtime changes, and never on a clock."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._seen: tuple[int, int] | None = None
        self._value = ""
        self.header()  # fail now, at connect, if it cannot be read

    def header(self) -> str:
        try:
            stat = os.stat(self._path)
            key = (stat.st_ino, stat.st_mtime_ns)
            if key != self._seen:
                self._value = self._path.read_text().strip()
                self._seen = key
        except OSError as error:
            if self._seen is None:
                raise KubeConfigError(f"token file {self._path}: {error.strerror}") from None
            # Mid-rotation or briefly unreadable: the last token read is still the best guess.
        return f"Bearer {self._value}"


@dataclass(frozen=True)
class Credentials:
    server: str  # scheme://host[:port][/prefix], without a trailing slash
    ssl: ssl.SSLContext | None  # None for http://
    token: Token | None = None
    tls_server_name: str | None = None
    proxy: str | None = None


def in_cluster(
    environ: Mapping[str, str] = os.environ, folder: Path = SERVICE_ACCOUNT
) -> Credentials:
    """The pod's service account, as client-go's rest.InClusterConfig reads it."""
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeConfigError("in-cluster: KUBERNETES_SERVICE_HOST/PORT not set")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return Credentials(
        server=f"https://{host}:{port}",
        ssl=_ssl_context(ca_file=str(folder / "ca.crt")),
        token=TokenFile(folder / "token"),
    )


async def from_kubeconfig(path: str | None = None, context: str | None = None) -> Credentials:
    """`path`, else $KUBECONFIG, else ~/.kube/config; its `context` or its current one."""
    where = path or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    if os.pathsep in where:
        return await _delegated(where, context)  # several files, merged as kubectl merges them
    read = _read(where, context)
    if isinstance(read, Credentials):
        return read
    return await _delegated(*read)


def _read(where: str, context: str | None) -> Credentials | tuple[str, str]:
    """The credentials of one kubeconfig file, or (file, context) for kubernetes_asyncio."""
    file = Path(where).expanduser()
    try:
        document = yaml.safe_load(file.read_text())
    except OSError as error:
        raise KubeConfigError(f"kubeconfig {file}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise KubeConfigError(f"kubeconfig {file}: not YAML: {error}") from None
    if not isinstance(document, dict):
        raise KubeConfigError(f"kubeconfig {file}: not a kubeconfig")
    chosen = context or document.get("current-context")
    if not chosen:
        raise KubeConfigError(f"kubeconfig {file}: no context given and no current-context")
    entry = _named(document, "contexts", chosen, file).get("context") or {}
    cluster = _named(document, "clusters", entry.get("cluster"), file).get("cluster") or {}
    user = (
        (_named(document, "users", entry["user"], file).get("user") or {})
        if entry.get("user")
        else {}
    )
    if any(field in user for field in DELEGATED_USER_FIELDS):
        return str(file), str(chosen)
    return _static(cluster, user, base=file.parent, where=f"kubeconfig {file}, context {chosen}")


def _named(document: dict[str, Any], section: str, name: Any, file: Path) -> dict[str, Any]:
    for item in document.get(section) or []:
        if isinstance(item, dict) and item.get("name") == name:
            return item
    raise KubeConfigError(f"kubeconfig {file}: no {section[:-1]} named {name!r}")


def _static(
    cluster: dict[str, Any], user: dict[str, Any], *, base: Path, where: str
) -> Credentials:
    server = str(cluster.get("server") or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise KubeConfigError(f"{where}: the cluster has no http(s) server")
    context = None
    if server.startswith("https://"):
        with tempfile.TemporaryDirectory(prefix="rebalancer-kube-") as folder:
            context = _ssl_context(
                ca_file=_file(cluster, "certificate-authority", base),
                ca_data=_data(cluster, "certificate-authority-data", where),
                cert_file=_file(user, "client-certificate", base)
                or _written(user, "client-certificate-data", Path(folder), where),
                key_file=_file(user, "client-key", base)
                or _written(user, "client-key-data", Path(folder), where),
                verify=not cluster.get("insecure-skip-tls-verify", False),
            )
    token: Token | None = None
    if user.get("token"):
        token = FixedToken(f"Bearer {user['token']}")
    elif user.get("tokenFile"):
        token = TokenFile(base / str(user["tokenFile"]))
    elif user.get("username") and user.get("password"):
        pair = f"{user['username']}:{user['password']}".encode()
        token = FixedToken(f"Basic {base64.b64encode(pair).decode()}")
    return Credentials(
        server=server,
        ssl=context,
        token=token,
        tls_server_name=cluster.get("tls-server-name"),
        proxy=cluster.get("proxy-url"),
    )


def _file(section: dict[str, Any], key: str, base: Path) -> str | None:
    """A path field; relative paths are relative to the kubeconfig's folder, as kubectl reads
    them."""
    value = section.get(key)
    return str(base / Path(str(value)).expanduser()) if value else None


def _data(section: dict[str, Any], key: str, where: str) -> str | None:
    value = section.get(key)
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except ValueError:
        raise KubeConfigError(f"{where}: {key} is not base64 of a PEM text") from None


def _written(section: dict[str, Any], key: str, folder: Path, where: str) -> str | None:
    """A `-data` field in a file, for `load_cert_chain`, which reads files only; the folder goes
    as soon as the context has loaded it."""
    text = _data(section, key, where)
    if text is None:
        return None
    path = folder / key
    path.write_text(text)
    return str(path)


def _ssl_context(
    *,
    ca_file: str | None = None,
    ca_data: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
        if cert_file:
            context.load_cert_chain(cert_file, keyfile=key_file)
    except (OSError, ssl.SSLError) as error:
        raise KubeConfigError(f"TLS material: {error}") from None
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


async def _delegated(config_file: str, context: str | None) -> Credentials:
    """kubernetes_asyncio's loader (exec plugins, auth providers, merged files); it imports the
    whole generated client, which only a user's command line pays for."""
    from kubernetes_asyncio import client as k8s_client
    from kubernetes_asyncio import config as k8s_config

    configuration = k8s_client.Configuration()
    try:
        await k8s_config.load_kube_config(
            config_file=config_file, context=context, client_configuration=configuration
        )
    except k8s_config.ConfigException as error:
        raise KubeConfigError(f"kubeconfig {config_file}: {error}") from None
    header = configuration.api_key.get("BearerToken")
    return Credentials(
        server=str(configuration.host).rstrip("/"),
        ssl=_ssl_context(
            ca_file=configuration.ssl_ca_cert,
            cert_file=configuration.cert_file,
            key_file=configuration.key_file,
            verify=bool(configuration.verify_ssl),
        )
        if str(configuration.host).startswith("https://")
        else None,
        token=FixedToken(str(header)) if header else None,
        tls_server_name=configuration.tls_server_name,
        proxy=configuration.proxy,
    )
