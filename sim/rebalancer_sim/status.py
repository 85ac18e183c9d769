"""API errors as upstream's `Status` bodies: the same codes, reasons and messages.

`ApiError` is raised anywhere in the emulator's request path (store, patch, eviction) and turned
into a JSON `Status` by the API server. Message texts follow k8s.io/apimachinery's
`pkg/api/errors` so that clients matching on them behave as against a real cluster.
"""

from __future__ import annotations

from typing import Any

from rebalancer_sim.resources import ResourceType


class ApiError(Exception):
    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after_seconds: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after_seconds = retry_after_seconds

    def body(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            status["reason"] = self.reason
        if self.details is not None:
            status["details"] = self.details
        status["code"] = self.code
        return status


def _details(resource: ResourceType, name: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    details.update(extra)
    return details


def not_found(resource: ResourceType, name: str) -> ApiError:
    return ApiError(
        404,
        "NotFound",
        f'{resource.qualified} "{name}" not found',
        details=_details(resource, name),
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", details={})


def already_exists(resource: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{resource.qualified} "{name}" already exists',
        details=_details(resource, name),
    )


def conflict(resource: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource.qualified} "{name}": {why}',
        details=_details(resource, name),
    )


def precondition_failed(
    resource: ResourceType, name: str, field: str, wanted: str, actual: str
) -> ApiError:
    """A delete whose UID or ResourceVersion precondition does not hold. Upstream's registry
    names the resource by its Kind here ("Pod", "Deployment.apps"), not by its plural."""
    kind = f"{resource.kind}.{resource.group}" if resource.group else resource.kind
    consequence = (
        "The object might have been deleted and then recreated"
        if field == "UID"
        else "The object might have been modified"
    )
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {kind} "{name}": the {field} in the precondition '
        f"({wanted}) does not match the {field} in record ({actual}). {consequence}",
        details=_details(resource, name, kind=resource.kind),
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid(resource: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """causes: (field, reason such as FieldValueRequired, message)."""
    text = ", ".join(f"{field}: {message}" for field, _, message in causes)
    if len(causes) > 1:
        text = f"[{text}]"  # an aggregate of field errors, as upstream prints it
    details: dict[str, Any] = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.kind
    details["causes"] = [
        {"reason": reason, "message": message, "field": field} for field, reason, message in causes
    ]
    kind = f"{resource.kind}.{resource.group}" if resource.group else resource.kind
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {text}', details=details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def internal_error(message: str) -> ApiError:
    """apierrors.NewInternalError: a 500 whose one cause is the error's text."""
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        details={"causes": [{"message": message}]},
    )


def method_not_allowed() -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        details={},
    )


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"application/json-patch+json, application/merge-patch+json, "
        f"application/apply-patch+yaml, application/strategic-merge-patch+json "
        f"(got {content_type!r})",
    )


def success(resource: ResourceType, name: str, uid: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    details["uid"] = uid
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }
