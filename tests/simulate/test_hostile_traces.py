"""Hostile traces (issue 18, item 9): each is refused with one InputError naming the file and the
problem, before any of it is used. On main they gave tracebacks (deep JSON, 1e999, NaN counts), a
table of "nan%" (`gap_seconds: NaN`), a hang (`gap_seconds: 1e999`) and 23.5 GB of memory from a
60-byte file (a count of 10^9 became `max(data)` slots: `random.sample(range(slots), k)`).

The bounds are far beyond the public traces (checked here on every one of them).
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from rebalancer.cli import main
from rebalancer.simulate import InputError
from rebalancer.simulate.files import load_traces
from rebalancer.simulate.trace import (
    MAX_CHANGES,
    MAX_INSTANCES,
    MAX_JSON_CONTAINERS,
    MAX_JSON_DEPTH,
    MAX_TICKS,
    MAX_TRACE_BYTES,
    parse_trace,
)

# The shared data sits beside the repository (`../shared/data/spot-traces/`), or a worktree's.
PUBLIC = next(
    (
        folder / "shared/data/spot-traces"
        for folder in Path(__file__).resolve().parents
        if (folder / "shared/data/spot-traces").is_dir()
    ),
    Path("shared/data/spot-traces"),
)


def trace(data: str = "[1, 0, 1]", gap: str = "300") -> str:
    """The JSON text of a trace, its numbers written as given (NaN, 1e999 are not JSON values
    json.dumps would write)."""
    return f'{{"metadata": {{"gap_seconds": {gap}}}, "data": {data}}}'


HOSTILE = [
    ("deep JSON", trace(data="[" * 100_000 + "]" * 100_000), f"more than {MAX_JSON_CONTAINERS} arrays and objects"),
    ("nested 9 deep", trace(data="[" * 8 + "]" * 8), f"nested deeper than {MAX_JSON_DEPTH}"),
    ("a million arrays", trace(data="[" + "[], " * 1_000_000 + "[]]"), f"more than {MAX_JSON_CONTAINERS} arrays and objects"),
    ("unterminated strings (linear to blank)", '"\\' * 200_000, "not JSON (Unterminated string"),
    ("deep metadata", '{"metadata": ' + '{"a": ' * 50 + "1" + "}" * 50 + ', "data": [1]}', "nested deeper"),
    ("brackets in strings are text", trace(gap='"[[[[[[[[[[[[[["'), "gap_seconds must be a positive number"),
    ("a count of 1e999", trace(data="[1, 0, 1e999]"), "1e999 is not a finite number"),
    ("a gap of 1e999 (the hang)", trace(gap="1e999"), "1e999 is not a finite number"),
    ("a gap of -1e999", trace(gap="-1e999"), "-1e999 is not a finite number"),
    ("a gap of NaN (the nan% table)", trace(gap="NaN"), "NaN is not a number a trace can hold"),
    ("a count of NaN", trace(data="[1, NaN]"), "NaN is not a number"),
    ("a count of Infinity", trace(data="[Infinity]"), "Infinity is not a number"),
    ("a 5000-digit count", trace(data="[" + "9" * 5000 + "]"), "a number of 5000 digits"),
    ("10^9 instances (the 23.5 GB)", trace(data="[1000000000, 0]", gap="1"), f"more than {MAX_INSTANCES}"),
    ("1e300 instances", trace(data="[1e300]"), f"more than {MAX_INSTANCES}"),
    ("a gap of a nanosecond", trace(gap="1e-9"), "gap_seconds 1e-09 is outside 1..86400 s"),
    ("a gap of a century", trace(gap="3153600000"), "is outside 1..86400 s"),
    ("too many ticks", trace(data=json.dumps([0] * (MAX_TICKS + 1)), gap="1"), f"more than {MAX_TICKS}"),
    ("more than a year", trace(data=json.dumps([1] * 400), gap="86400"), "span 400 days, more than 366"),
    ("a flood of waves", trace(data=json.dumps([1000, 0] * 60)), f"more than {MAX_CHANGES} instances lost and returned"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "text", "problem"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_trace_is_refused_naming_the_file_and_the_problem(
    what: str, text: str, problem: str
) -> None:
    with pytest.raises(InputError) as error:
        parse_trace(text, source="pools/evil.json", name="evil")
    message = str(error.value)
    assert message.startswith("pools/evil.json: ") and problem in message
    assert "\n" not in message


def test_refusing_the_60_byte_file_allocates_nothing_of_its_size() -> None:
    text = trace(data="[1000000000, 0]", gap="1")
    tracemalloc.start()
    try:
        with pytest.raises(InputError):
            parse_trace(text, source="evil.json", name="evil")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


def test_a_file_too_large_is_not_read_whole(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(trace(data="[" + "1, " * (MAX_TRACE_BYTES // 3) + "1]"))
    with pytest.raises(InputError, match=f"{big}: trace larger than {MAX_TRACE_BYTES} bytes"):
        load_traces([big])


def test_not_a_text_file(tmp_path: Path) -> None:
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe" + b"\x00" * 10)
    with pytest.raises(InputError, match="cannot read trace"):
        load_traces([binary])


@pytest.mark.skipif(not PUBLIC.is_dir(), reason="the public traces are not on this machine")
def test_every_public_trace_is_within_the_bounds() -> None:
    traces = load_traces([PUBLIC])
    assert len(traces) == 14
    assert max(t.slots for t in traces) == 16


def test_a_bound_itself_is_allowed() -> None:
    at_limit = parse_trace(
        trace(data=json.dumps([MAX_INSTANCES, 0]), gap="86400"), source="t", name="t"
    )
    assert at_limit.slots == MAX_INSTANCES


@pytest.mark.parametrize(
    ("what", "text", "problem"),
    [HOSTILE[0], HOSTILE[7], HOSTILE[9], HOSTILE[13]],
    ids=["deep", "hang", "nan", "memory"],
)
def test_the_command_says_one_line_and_exits_2(
    what: str, text: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "evil.json"
    path.write_text(text)
    assert main(["simulate", "--trace", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"rebalancer simulate: {path}: ") and problem in line


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_number_flag_must_be_finite(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", f"--days={value}"])
    assert exit_.value.code == 2
    assert f"argument --days: '{value}' is not a finite number" in capsys.readouterr().err


LAUGHS = """traces: &a ["x.json", "x", "x", "x", "x", "x", "x", "x", "x"]
replicas: [&b [*a, *a, *a, *a, *a, *a, *a, *a, *a], &c [*b, *b, *b, *b, *b, *b, *b, *b, *b],
  &d [*c, *c, *c, *c, *c, *c, *c, *c, *c], &e [*d, *d, *d, *d, *d, *d, *d, *d, *d],
  &f [*e, *e, *e, *e, *e, *e, *e, *e, *e], &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]]
"""


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (LAUGHS, "not YAML: an alias (*name): not allowed"),  # on main: a 50 MB message
        ("replicas: [1\n", "not YAML: while parsing a flow sequence"),
        ("# " + "x" * (1024 * 1024) + "\n", "config larger than 1048576 bytes"),
    ],
    ids=["billion laughs", "broken YAML", "too large"],
)
def test_a_hostile_config_is_one_line_and_exit_2(
    text: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    assert main(["simulate", "--config", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"rebalancer simulate: {path}: {problem}")
    assert len(line) < 1000
