"""Helpers for the simulator's tests: traces written to temporary files, a small scenario."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest


@pytest.fixture
def write_trace(tmp_path: Path) -> Callable[..., Path]:
    def write(name: str, data: Sequence[object], gap_seconds: float = 600) -> Path:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"metadata": {"gap_seconds": gap_seconds}, "data": list(data)}))
        return path

    return write
