"""Mutating admission webhooks, called on Pod CREATE the way kube-apiserver calls them.

What the API server does between decoding a new pod and storing it (upstream:
`k8s.io/apiserver/pkg/admission/plugin/webhook`, `mutating/dispatcher.go`): every
MutatingWebhookConfiguration, sorted by name, and every webhook of it in list order, whose rules,
namespaceSelector (the labels of the Namespace object) and objectSelector (the pod's labels)
match, gets an `admission.k8s.io/v1` AdmissionReview by HTTPS POST, under its `timeoutSeconds`.
A JSON patch in the answer changes the pod the next webhook sees and the store keeps;
`allowed: false` refuses the create with the webhook's status; a call that fails (connection,
TLS, timeout, an invalid answer, an undecodable patch) is skipped with a warning under
`failurePolicy: Ignore` and refuses the create with upstream's 500 under `Fail`. A patch that
decodes but does not apply refuses the create whatever the policy, as upstream does.

Both ways pods are created come here: the HTTP API (`apiserver`) and the emulator's own
controllers (`workloads.PodCreations`, as the ServiceAccount of each controller).

Not here: matchConditions (CEL) are not evaluated (a webhook that has them is called as if they
matched); reinvocationPolicy IfNeeded is treated as Never; matchPolicy is Equivalent (pods have
no other version to be equivalent to); only Pod CREATE is admitted (no other resource or
operation, no validating webhooks); only v1 AdmissionReviews are sent. There is no Service
networking: a `clientConfig.service` is reached through `webhook_services`, an explicit map
from `"<namespace>/<name>:<port>"` to a `host:port` on this machine, while its certificate is
still verified against `<name>.<namespace>.svc`, with `caBundle` as the only trust root.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import enum
import json
import logging
import ssl
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp

from rebalancer_sim import defaults, patch
from rebalancer_sim import resources as R
from rebalancer_sim.resources import ResourceType
from rebalancer_sim.selectors import label_selector_object
from rebalancer_sim.status import ApiError, bad_request, internal_error, not_found
from rebalancer_sim.store import Obj, Store, dumps

log = logging.getLogger(__name__)

REVIEW_API_VERSION = "admission.k8s.io/v1"
UserInfo = dict[str, Any]  # authentication.k8s.io/v1 UserInfo: username, uid, groups

# The emulator has no authentication: a request without impersonation headers is admitted as
# AKS's admin credential is.
API_USER: UserInfo = {
    "username": "masterclient",
    "groups": ["system:masters", "system:authenticated"],
}
CREATE_OPTIONS: Obj = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH
_NAME_MISMATCH = frozenset({62, 64})
_UNVERIFIED = "tls: failed to verify certificate"


def controller_user(controller: str) -> UserInfo:
    """The identity kube-controller-manager's controllers act as (`--use-service-account-
    credentials`, as on AKS): `replicaset-controller`, `daemon-set-controller`, ..."""
    return {
        "username": f"system:serviceaccount:kube-system:{controller}",
        "groups": [
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
            "system:authenticated",
        ],
    }


class Outcome(enum.StrEnum):
    PATCHED = "patched"  # allowed, with a patch that changed the object
    ALLOWED = "allowed"  # allowed, without a patch
    DENIED = "denied"  # `allowed: false`: the create refused with the webhook's status
    FAILED_OPEN = "failed-open"  # the call failed, failurePolicy Ignore: the create went on
    FAILED_CLOSED = "failed-closed"  # the call failed, failurePolicy Fail: the create refused
    REFUSED = "refused"  # refused whatever the policy: a patch that does not apply, a dry run


@dataclass(frozen=True)
class WebhookCall:
    """One webhook called for one create: what tests and measurements read."""

    configuration: str
    webhook: str
    namespace: str
    name: str  # the object's name, or its generateName
    user: str
    dry_run: bool
    outcome: Outcome
    latency_seconds: float
    message: str = ""  # why it failed or refused
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Hook:
    configuration: str
    spec: Obj  # the webhook as stored

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def ignores_failures(self) -> bool:
        return bool(self.spec.get("failurePolicy", "Fail") == "Ignore")

    @property
    def timeout_seconds(self) -> int:
        return int(self.spec.get("timeoutSeconds") or 10)


class _CallFailed(Exception):
    """Upstream's ErrCallingWebhook: handled as the webhook's failurePolicy says."""


class Admission:
    """The mutating admission webhooks of one emulated API server."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # "<namespace>/<name>:<port>" of a webhook's Service -> "host:port" where it listens.
        self.webhook_services: dict[str, str] = {}
        self.calls: list[WebhookCall] = []
        self._session: aiohttp.ClientSession | None = None
        self._tls: dict[str, ssl.SSLContext] = {}

    # ---- which webhooks ----------------------------------------------------------------------

    def matching(
        self,
        obj: Obj,
        *,
        namespace: str,
        resource: ResourceType = R.PODS,
        operation: str = "CREATE",
    ) -> list[_Hook]:
        """The webhooks to call, in upstream's order. Raises NotFound for a namespace a
        webhook's namespaceSelector cannot be evaluated against (upstream's 404)."""
        configurations = list(self.store.items(R.MUTATING_WEBHOOKS))
        if not configurations:
            return []
        labels = (obj.get("metadata") or {}).get("labels") or {}
        hooks = []
        for configuration in sorted(configurations, key=lambda c: c["metadata"]["name"]):
            for spec in configuration.get("webhooks") or []:
                rules = spec.get("rules") or []
                if not any(_rule_matches(r, resource, operation, namespace) for r in rules):
                    continue
                if not label_selector_object(spec.get("objectSelector") or {})(labels):
                    continue
                if not self._namespace_matches(spec.get("namespaceSelector") or {}, namespace):
                    continue
                hooks.append(_Hook(configuration["metadata"]["name"], spec))
        return hooks

    def _namespace_matches(self, selector: Obj, namespace: str) -> bool:
        """Upstream's namespace matcher: cluster-scoped objects are never exempted, an empty
        selector matches all, else the Namespace object's labels decide."""
        if not namespace or not (selector.get("matchLabels") or selector.get("matchExpressions")):
            return True
        namespace_obj = self.store.get(R.NAMESPACES, "", namespace)
        if namespace_obj is None:
            raise not_found(R.NAMESPACES, namespace)
        return label_selector_object(selector)(namespace_obj["metadata"].get("labels") or {})

    # ---- calling them ------------------------------------------------------------------------

    async def admit(
        self,
        obj: Obj,
        *,
        namespace: str,
        user: UserInfo,
        dry_run: bool = False,
        options: Obj | None = None,
        resource: ResourceType = R.PODS,
    ) -> tuple[Obj, list[str]]:
        """The object as the matching webhooks leave it, and their warnings. Raises the
        `ApiError` the create fails with. Without a matching webhook: `obj` itself."""
        hooks = self.matching(obj, namespace=namespace, resource=resource)
        if not hooks:
            return obj, []
        if namespace and self.store.get(R.NAMESPACES, "", namespace) is None:
            raise not_found(R.NAMESPACES, namespace)  # NamespaceLifecycle runs before webhooks
        current = _as_decoded(obj, resource, namespace)
        warnings: list[str] = []
        for hook in hooks:
            current = await self._call(
                hook,
                current,
                resource=resource,
                namespace=namespace,
                user=user,
                dry_run=dry_run,
                options=options or CREATE_OPTIONS,
                warnings=warnings,
            )
        if ((current.get("metadata") or {}).get("namespace") or "") != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        return current, warnings

    async def _call(
        self,
        hook: _Hook,
        current: Obj,
        *,
        resource: ResourceType,
        namespace: str,
        user: UserInfo,
        dry_run: bool,
        options: Obj,
        warnings: list[str],
    ) -> Obj:
        loop = asyncio.get_running_loop()
        started = loop.time()
        meta = current.get("metadata") or {}

        def record(outcome: Outcome, message: str = "", said: list[str] | None = None) -> None:
            self.calls.append(
                WebhookCall(
                    configuration=hook.configuration,
                    webhook=hook.name,
                    namespace=namespace,
                    name=str(meta.get("name") or meta.get("generateName") or ""),
                    user=str(user.get("username", "")),
                    dry_run=dry_run,
                    outcome=outcome,
                    latency_seconds=loop.time() - started,
                    message=message,
                    warnings=tuple(said or ()),
                )
            )

        if dry_run and hook.spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
            refusal = bad_request(f'admission webhook "{hook.name}" does not support dry run')
            record(Outcome.REFUSED, refusal.message)
            raise refusal
        said: list[str] = []
        try:
            if "v1" not in (hook.spec.get("admissionReviewVersions") or []):
                raise _CallFailed(
                    "could not create admission objects: the emulator sends only "
                    "admission.k8s.io/v1 AdmissionReviews"
                )
            uid = str(uuid.uuid4())
            review = _review(
                uid,
                current,
                resource=resource,
                namespace=namespace,
                user=user,
                dry_run=dry_run,
                options=options,
            )
            response = _verified(uid, await self._post(hook, dumps(review)))
            said = [str(w) for w in response.get("warnings") or []]
            for text in said:
                log.warning("admission webhook %s: warning: %s", hook.name, text)
            warnings += said
            if response.get("allowed") is not True:
                refusal = _denied(hook.name, response.get("status"))
                record(Outcome.DENIED, refusal.message, said)
                raise refusal
            operations = _patch_operations(response)
        except _CallFailed as failure:
            message = f'failed calling webhook "{hook.name}": {failure}'
            if hook.ignores_failures:
                log.warning("Failed calling webhook, failing open %s: %s", hook.name, message)
                record(Outcome.FAILED_OPEN, message, said)
                return current
            record(Outcome.FAILED_CLOSED, message, said)
            raise internal_error(message) from None
        if not operations:
            record(Outcome.ALLOWED, said=said)
            return current
        try:
            patched = patch.json_patch(current, operations)
        except ApiError as error:
            detail = getattr(error, "detail", "") or error.message
            record(Outcome.REFUSED, detail, said)
            raise internal_error(detail) from None
        if resource is R.PODS:
            defaults.pod_spec_defaults(patched)  # upstream defaults the patched object again
        record(Outcome.PATCHED if patched != current else Outcome.ALLOWED, said=said)
        return patched

    async def _post(self, hook: _Hook, body: bytes) -> Any:
        """POST the review as upstream's webhook client does; the decoded JSON answer."""
        client = hook.spec.get("clientConfig") or {}
        timeout = hook.timeout_seconds
        headers = {"Content-Type": "application/json", "Accept": "application/json, */*"}
        server_name: str | None = None
        if client.get("service"):
            service = client["service"]
            port = int(service.get("port") or 443)
            path = str(service.get("path") or "")
            server_name = f"{service.get('name')}.{service.get('namespace')}.svc"
            shown = f"https://{server_name}:{port}{path}?timeout={timeout}s"
            address = self.webhook_services.get(
                f"{service.get('namespace')}/{service.get('name')}:{port}"
            )
            if address is None:
                raise _CallFailed(
                    f'failed to call webhook: Post "{shown}": service "{service.get("name")}" '
                    "not found"
                )
            target = f"https://{address}{path}?timeout={timeout}s"
            headers["Host"] = f"{server_name}:{port}"
        else:
            shown = target = f"{client.get('url', '')}?timeout={timeout}s"
            address = _host_port(str(client.get("url", "")))
        context = self._tls_context(client.get("caBundle"))
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        try:
            async with asyncio.timeout(timeout):
                async with self._session.post(
                    target, data=body, headers=headers, ssl=context, server_hostname=server_name
                ) as answer:
                    status, raw = answer.status, await answer.read()
        except TimeoutError:
            raise _CallFailed(
                f'failed to call webhook: Post "{shown}": context deadline exceeded'
            ) from None
        except (aiohttp.ClientError, OSError) as error:
            reason = _go_error(error, address, server_name or _host(address))
            raise _CallFailed(f'failed to call webhook: Post "{shown}": {reason}') from None
        if not 200 <= status < 300:
            raise _CallFailed(f"failed to call webhook: {_status_text(status, raw)}")
        try:
            return json.loads(raw)
        except ValueError as error:
            raise _CallFailed(f"failed to call webhook: {error}") from None

    def _tls_context(self, ca_bundle: Any) -> ssl.SSLContext:
        """`caBundle` (base64 of PEM) as the only trust root; without one, the system's roots,
        as upstream's client has then."""
        key = str(ca_bundle or "")
        context = self._tls.get(key)
        if context is None:
            try:
                pem = base64.b64decode(key, validate=True).decode() if key else None
                context = ssl.create_default_context(cadata=pem)
            except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError):
                raise _CallFailed(
                    "could not get REST client: unable to load root certificates: unable to "
                    "parse bytes as PEM block"
                ) from None
            context.set_alpn_protocols(["http/1.1"])
            self._tls[key] = context
        return context

    # ---- what happened -----------------------------------------------------------------------

    def outcomes(self) -> Counter[str]:
        """How many calls ended how (`Outcome` values)."""
        return Counter(call.outcome.value for call in self.calls)

    def register(
        self,
        name: str,
        *,
        webhook: str,
        address: str,
        ca_bundle: bytes | None,
        service: str | None = "default/webhook:443",
        path: str = "/mutate",
        failure_policy: str = "Fail",
        timeout_seconds: int = 10,
        scope: str = "*",
        namespace_selector: Obj | None = None,
        object_selector: Obj | None = None,
    ) -> Obj:
        """Register a webhook that listens on this machine (`address`, "host:port") for Pod
        CREATE, as a cluster operator would: a MutatingWebhookConfiguration `name` (replacing
        one of that name) with one webhook, reached through `service` ("<namespace>/<name>:
        <port>", mapped to `address` in `webhook_services`; its certificate must be valid for
        `<name>.<namespace>.svc`) or, with `service=None`, through `url: https://<address>
        <path>`. `ca_bundle`: the PEM of the CA that signed the webhook's certificate, or None
        for a webhook that puts its own CA into the configuration later."""
        client: Obj = {}
        if service is None:
            client["url"] = f"https://{address}{path}"
        else:
            reference, _, port = service.rpartition(":")
            service_namespace, _, service_name = reference.partition("/")
            client["service"] = {
                "namespace": service_namespace,
                "name": service_name,
                "path": path,
                "port": int(port),
            }
            self.webhook_services[service] = address
        if ca_bundle is not None:
            client["caBundle"] = base64.b64encode(ca_bundle).decode()
        rule = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"]}
        configuration: Obj = {
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": webhook,
                    "clientConfig": client,
                    "rules": [{**rule, "resources": ["pods"], "scope": scope}],
                    "failurePolicy": failure_policy,
                    "timeoutSeconds": timeout_seconds,
                    "namespaceSelector": namespace_selector or {},
                    "objectSelector": object_selector or {},
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        }
        if self.store.get(R.MUTATING_WEBHOOKS, "", name) is not None:
            self.store.delete(R.MUTATING_WEBHOOKS, "", name)
        return self.store.create(R.MUTATING_WEBHOOKS, configuration)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


# ---- the parts, pure ---------------------------------------------------------------------------


def _rule_matches(rule: Obj, resource: ResourceType, operation: str, namespace: str) -> bool:
    """Upstream's `rules.Matcher`: operation, group, version, resource (`*` is every resource
    without a subresource, `*/*` every one), scope."""

    def listed(values: Any, value: str) -> bool:
        return bool(values) and ("*" in values or value in values)

    if not (
        listed(rule.get("operations"), operation)
        and listed(rule.get("apiGroups"), resource.group)
        and listed(rule.get("apiVersions"), resource.version)
    ):
        return False
    if not any(
        parts[0] in ("*", resource.plural) and (len(parts) == 1 or parts[1] == "*")
        for parts in (str(r).split("/", 1) for r in rule.get("resources") or [])
    ):
        return False
    scope = rule.get("scope") or "*"
    is_namespace = resource is R.NAMESPACES
    if scope == "Cluster":
        return not namespace or is_namespace
    if scope == "Namespaced":
        return bool(namespace) and not is_namespace
    return True


def _as_decoded(obj: Obj, resource: ResourceType, namespace: str) -> Obj:
    """The object as upstream's admission sees it on a create: decoded and defaulted, in its
    namespace, with neither the name a generateName will get nor a uid, creation time or
    status yet."""
    decoded = {"kind": resource.kind, "apiVersion": resource.api_version, **copy.deepcopy(obj)}
    decoded["kind"], decoded["apiVersion"] = resource.kind, resource.api_version
    meta = decoded.setdefault("metadata", {})
    if namespace:
        meta["namespace"] = namespace
    meta.setdefault("creationTimestamp", None)
    if resource is R.PODS:
        defaults.pod_spec_defaults(decoded)
        decoded["status"] = {}
    return decoded


def _review(
    uid: str,
    obj: Obj,
    *,
    resource: ResourceType,
    namespace: str,
    user: UserInfo,
    dry_run: bool,
    options: Obj,
) -> Obj:
    kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    gvr = {"group": resource.group, "version": resource.version, "resource": resource.plural}
    request: Obj = {
        "uid": uid,
        "kind": kind,
        "resource": gvr,
        "requestKind": kind,
        "requestResource": gvr,
    }
    name = (obj.get("metadata") or {}).get("name")
    if name:
        request["name"] = name  # omitted with generateName, as upstream's `omitempty`
    if namespace:
        request["namespace"] = namespace
    request.update(
        operation="CREATE",
        userInfo=user,
        object=obj,
        oldObject=None,
        dryRun=dry_run,
        options=options,
    )
    return {"kind": "AdmissionReview", "apiVersion": REVIEW_API_VERSION, "request": request}


def _verified(uid: str, review: Any) -> Obj:
    """Upstream's VerifyAdmissionResponse for a v1 review: the response object."""
    invalid = "received invalid webhook response"
    if not isinstance(review, dict):
        raise _CallFailed(f"failed to call webhook: {invalid}: not an AdmissionReview object")
    response = review.get("response")
    if not isinstance(response, dict):
        raise _CallFailed(f"{invalid}: webhook response was absent")
    if response.get("uid") != uid:
        raise _CallFailed(
            f'{invalid}: expected response.uid="{uid}", got "{response.get("uid") or ""}"'
        )
    if (review.get("apiVersion"), review.get("kind")) != (REVIEW_API_VERSION, "AdmissionReview"):
        raise _CallFailed(
            f"{invalid}: expected webhook response of {REVIEW_API_VERSION}, Kind=AdmissionReview, "
            f"got {review.get('apiVersion') or ''}, Kind={review.get('kind') or ''}"
        )
    if response.get("patch") and response.get("patchType") is None:
        raise _CallFailed(f"{invalid}: webhook returned response.patch but not response.patchType")
    if not response.get("patch") and response.get("patchType") is not None:
        raise _CallFailed(f"{invalid}: webhook returned response.patchType but not response.patch")
    return response


def _patch_operations(response: Obj) -> list[Any]:
    """The JSON patch of an allowed response ([] for none); a patch that cannot be decoded, or
    of another type, is a failed call (upstream's ErrCallingWebhook)."""
    encoded = response.get("patch")
    if not encoded:
        return []
    try:
        raw = base64.b64decode(str(encoded), validate=True)
    except (binascii.Error, ValueError):
        raise _CallFailed("failed to call webhook: illegal base64 data in response.patch") from None
    if response.get("patchType") != "JSONPatch":
        raise _CallFailed(f'unsupported patch type "{response.get("patchType")}"')
    undecodable = "received undecodable patch in webhook response"
    try:
        operations = json.loads(raw)
    except ValueError as error:
        raise _CallFailed(f"{undecodable}: {error}") from None
    if not isinstance(operations, list):
        raise _CallFailed(
            f"{undecodable}: json: cannot unmarshal {_json_kind(operations)} into Go value of "
            "type jsonpatch.Patch"
        )
    for operation in operations:
        if not isinstance(operation, dict):
            raise _CallFailed(
                f"{undecodable}: json: cannot unmarshal {_json_kind(operation)} into Go value of "
                "type jsonpatch.Operation"
            )
    return operations


def _json_kind(value: Any) -> str:
    """How Go's encoding/json names a JSON value's type in an unmarshal error."""
    for kind, name in ((bool, "bool"), (int | float, "number"), (str, "string"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "array" if isinstance(value, list) else "null"


def _denied(webhook: str, result: Any) -> ApiError:
    """Upstream's ToStatusErr: the webhook's status, at least a 400, its message prefixed."""
    status = result if isinstance(result, dict) else {}
    code = status["code"] if isinstance(status.get("code"), int) else 0
    denied_by = f'admission webhook "{webhook}" denied the request'
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    return ApiError(
        max(code, 400),
        str(status.get("reason") or ""),
        message,
        details=status.get("details") if isinstance(status.get("details"), dict) else None,
    )


def _status_text(status: int, raw: bytes) -> str:
    """client-go's message for an HTTP status without a Status body (NewGenericServerResponse)."""
    known = {
        400: "the server rejected our request for an unknown reason",
        401: "the server has asked for the client to provide credentials",
        403: "the server does not allow access to the requested resource",
        404: "the server could not find the requested resource",
        405: "the server does not allow this method on the requested resource",
        422: "the server rejected our request due to an error in our request",
        429: "the server has received too many requests and has asked us to try again later",
        503: "the server is currently unable to handle the request",
        504: "the server was unable to return a response in the time allotted, but may still be "
        "processing the request",
    }
    if status in known:
        return known[status]
    if status >= 500:
        text = raw.decode(errors="replace").strip()
        return f'an error on the server ("{text}") has prevented the request from succeeding'
    return f"the server responded with the status code {status} but did not return more information"


def _go_error(error: BaseException, address: str, server_name: str) -> str:
    """A connection or TLS failure in the words of Go's net/http, which upstream reports."""
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        reason = error.certificate_error
        if getattr(reason, "verify_code", None) in _NAME_MISMATCH:
            return f"{_UNVERIFIED}: x509: certificate is not valid for {server_name}"
        return f"{_UNVERIFIED}: x509: certificate signed by unknown authority"
    if isinstance(error, aiohttp.ClientSSLError):
        return f"remote error: tls: {error}"
    if isinstance(error, aiohttp.ClientConnectorError):
        if isinstance(error.os_error, ConnectionRefusedError):
            return f"dial tcp {address}: connect: connection refused"
        return f"dial tcp {address}: {error.os_error.strerror or error.os_error}"
    if isinstance(error, aiohttp.ServerDisconnectedError):
        return "EOF"
    return str(error) or type(error).__name__


def _host_port(url: str) -> str:
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    return rest if ":" in rest.rsplit("]", 1)[-1] else f"{rest}:443"


def _host(address: str) -> str:
    return address.rsplit(":", 1)[0].strip("[]")
