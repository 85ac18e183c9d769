"""Seals on the records we keep on other people's objects, so a record cannot be forged into a
command.

A surge record says "scale this Deployment back to N"; a return record "remove this pod"; the
bounds we save on an HPA "put these back". Anyone who may annotate the object could write one, so
each record carries an HMAC-SHA256 (`"seal"` in a JSON record; ` seal=` after the HPA's bounds)
keyed by a secret only the controller reads (a Secret `<lease>-records`, created by the first
leader), over the object's kind, namespace, name and uid and the record's own text: a record
copied to another object, from a deleted and re-created one, or written by anyone else does not
verify. A record that does not verify is reported and ignored, never obeyed: the workload is left
alone (`WorkloadInfo.refused`), the HPA's saved bounds are not put back.

Pure: the executor seals what it writes, the snapshot is verified as it is built.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import replace
from typing import Any, Final

from rebalancer import names
from rebalancer.controller.model import ScaledObjectInfo, ScalerInfo, WorkloadInfo

FIELD: Final = "seal"
TEXT_MARK: Final = " seal="
KEY_BYTES: Final = 32
WORKLOAD_RECORDS: Final = (
    names.SURGE_ANNOTATION,
    names.RETURN_ANNOTATION,
    names.SPARE_RECORD,
    names.POLICY_IN_FORCE,
)
SCALER_RECORDS: Final = (names.HPA_ORIGINAL_ANNOTATION,)
MAX_RECORD_BYTES: Final = 64 * 1024
NOT_OURS: Final = (
    "not sealed by this controller (forged, copied, or written by another installation)"
)


def _canonical(data: dict[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def workload_identity(workload: WorkloadInfo) -> str:
    return f"{workload.kind}/{workload.namespace}/{workload.name}/{workload.uid}"


def scaler_identity(scaler: ScalerInfo) -> str:
    """The object our saved bounds are on: the HPA, or KEDA's ScaledObject that holds them."""
    if scaler.holder is not None:
        return scaled_object_identity(scaler.holder)
    return f"HorizontalPodAutoscaler/{scaler.namespace}/{scaler.name}/{scaler.uid}"


def scaled_object_identity(scaled: ScaledObjectInfo) -> str:
    return f"ScaledObject/{scaled.namespace}/{scaled.name}/{scaled.uid}"


class Sealer:
    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("a record key needs at least 16 bytes")
        self._key = key

    def _mac(self, identity: str, field: str, body: str) -> str:
        message = f"{identity}\n{field}\n{body}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def seal(self, identity: str, field: str, text: str) -> str:
        """`text` (a JSON object of ours, or a plain value) with its seal."""
        if text.startswith("{"):
            data = json.loads(text)
            data.pop(FIELD, None)
            body = _canonical(data)
            return _canonical({**data, FIELD: self._mac(identity, field, body)})
        return f"{text}{TEXT_MARK}{self._mac(identity, field, text)}"

    def open(self, identity: str, field: str, sealed: str) -> str:
        """The record without its seal; ValueError if the seal is missing or wrong."""
        if len(sealed) > MAX_RECORD_BYTES:
            raise ValueError("record larger than 64 KiB")
        if sealed.startswith("{"):
            try:
                data = json.loads(sealed)
            except (ValueError, RecursionError):
                raise ValueError("not JSON") from None
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            mac = data.pop(FIELD, None)
            body = _canonical(data)
        else:
            body, _, mac = sealed.rpartition(TEXT_MARK)
        if not isinstance(mac, str) or not hmac.compare_digest(
            mac.encode(), self._mac(identity, field, body).encode()
        ):
            raise ValueError(NOT_OURS)
        return body

    def seal_patch(self, identity: str, fields: tuple[str, ...], patch: dict[str, Any]) -> None:
        """Seal, in place, the records of ours a merge patch writes (None deletes: left as is)."""
        annotations = (patch.get("metadata") or {}).get("annotations") or {}
        for field in fields:
            text = annotations.get(field)
            if isinstance(text, str):
                annotations[field] = self.seal(identity, field, text)

    def verify_workload(self, workload: WorkloadInfo) -> WorkloadInfo:
        """The workload with every record of ours checked: one that does not verify makes the
        workload refused (left alone, reported), and a surge record is then not read at all."""
        identity = workload_identity(workload)
        problems = []
        for field in WORKLOAD_RECORDS:
            text = workload.annotations.get(field)
            if text is None:
                continue
            try:
                self.open(identity, field, text)
            except ValueError as error:
                problems.append(f"{field}: {error}")
        if not problems:
            return workload
        surge_bad = any(p.startswith(f"{names.SURGE_ANNOTATION}:") for p in problems)
        return replace(
            workload,
            refused=(*workload.refused, *problems),
            surge=None if surge_bad else workload.surge,
            surge_unreadable=False if surge_bad else workload.surge_unreadable,
        )

    def verify_scaler(self, scaler: ScalerInfo) -> ScalerInfo:
        """The HPA with its saved bounds opened, or marked not ours (then never put back); held
        through a ScaledObject (keda.py), the ScaledObject's."""
        if scaler.original is None:
            return scaler
        field = names.HPA_ORIGINAL_ANNOTATION
        try:
            opened = self.open(scaler_identity(scaler), field, scaler.original)
        except ValueError as error:
            return replace(scaler, saved=None, refused=f"{field}: {error}")
        return replace(scaler, saved=opened)
