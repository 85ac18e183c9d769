"""The Scheduled Events parser on the documented examples, and on anything at all."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.azure.scheduled_events import (
    DocumentError,
    format_not_before,
    parse_document,
    parse_not_before,
)

# Shared reference A.4 (1): the live-migration sequence, verbatim.
LIVE_MIGRATION = [
    '{"DocumentIncarnation": 1, "Events": []}',
    """{
    "DocumentIncarnation":  2,
    "Events":  [{"EventId":  "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "EventStatus":  "Scheduled",
                 "EventType":  "Freeze", "ResourceType":  "VirtualMachine",
                 "Resources":  ["WestNO_0", "WestNO_1"],
                 "NotBefore":  "Mon, 11 Apr 2026 22:26:58 GMT",
                 "Description":  "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
                 "EventSource":  "Platform", "DurationInSeconds":  5}]}""",
    """{
    "DocumentIncarnation":  3,
    "Events":  [{"EventId":  "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "EventStatus":  "Started",
                 "EventType":  "Freeze", "ResourceType":  "VirtualMachine",
                 "Resources":  ["WestNO_0", "WestNO_1"], "NotBefore":  "",
                 "Description":  "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
                 "EventSource":  "Platform", "DurationInSeconds":  5}]}""",
    '{"DocumentIncarnation":  4, "Events":  []}',
]
# A.4 (2): Preempt after `az vm simulate-eviction`, api-version 2019-08-01 (no DurationInSeconds).
SIMULATED_EVICTION = (
    '{"DocumentIncarnation":1,"Events":[{"EventId":"A123BC45-1234-5678-AB90-ABCDEF123456",'
    '"EventStatus":"Scheduled","EventType":"Preempt","ResourceType":"VirtualMachine",'
    '"Resources":["myspotvm"],"NotBefore":"Tue, 16 Mar 2021 00:58:46 GMT","Description":"",'
    '"EventSource":"Platform"}]}'
)
# A.4 (3): Preempt at 2020-07-01.
PREEMPT_2020 = """{
   "DocumentIncarnation": 1,
   "Events":[{"EventId": "C1BF8322-4CBF-4FC4-9C45-B40CF3106D0E", "EventStatus": "Scheduled",
              "EventType": "Preempt", "ResourceType": "VirtualMachine", "Resources": ["vm-spot"],
              "NotBefore": "Tue, 09 Aug 2022 17:07:32 GMT", "Description": "",
              "EventSource": "Platform", "DurationInSeconds": -1}]}"""
# A.4 (4): an AKS spot node pool VM.
AKS_PREEMPT = (
    '{"DocumentIncarnation":1,"Events":[{"EventId":"51941B56-8080-45AC-81AE-8BDA818F5958",'
    '"EventStatus":"Scheduled","EventType":"Preempt","ResourceType":"VirtualMachine",'
    '"Resources":["aks-workloads1-15413341-vmss_3"],"NotBefore":"Sat, 16 Mar 2024 19:52:09 GMT",'
    '"Description":"","EventSource":"Platform"}]}'
)


def test_live_migration_sequence() -> None:
    documents = [parse_document(text) for text in LIVE_MIGRATION]
    assert [d.incarnation for d in documents] == [1, 2, 3, 4]
    assert documents[0].events == () and documents[3].events == ()
    scheduled = documents[1].events[0]
    assert scheduled.event_id == "C7061BAC-AFDC-4513-B24B-AA5F13A16123"
    assert scheduled.event_type == "Freeze" and scheduled.known_type
    assert scheduled.status == "Scheduled"
    assert scheduled.resources == ("WestNO_0", "WestNO_1")
    assert scheduled.not_before == datetime(2026, 4, 11, 22, 26, 58, tzinfo=UTC)
    assert scheduled.duration_seconds == 5
    assert scheduled.event_source == "Platform"
    assert scheduled.description.startswith("Virtual machine is being paused")
    started = documents[2].events[0]
    assert started.status == "Started"
    assert started.not_before is None and started.not_before_raw == ""
    assert not started.not_before_invalid
    assert started.event_id == scheduled.event_id


@pytest.mark.parametrize(
    ("text", "vm", "not_before", "duration"),
    [
        (SIMULATED_EVICTION, "myspotvm", datetime(2021, 3, 16, 0, 58, 46, tzinfo=UTC), None),
        (PREEMPT_2020, "vm-spot", datetime(2022, 8, 9, 17, 7, 32, tzinfo=UTC), -1),
        (
            AKS_PREEMPT,
            "aks-workloads1-15413341-vmss_3",
            datetime(2024, 3, 16, 19, 52, 9, tzinfo=UTC),
            None,
        ),
    ],
)
def test_preempt_examples(text: str, vm: str, not_before: datetime, duration: int | None) -> None:
    document = parse_document(text)
    (event,) = document.events
    assert event.event_type == "Preempt"
    assert event.status == "Scheduled"
    assert event.resources == (vm,)
    assert event.not_before == not_before
    assert event.duration_seconds == duration
    assert event.description == ""


def test_unknown_type_and_new_fields_are_kept() -> None:
    text = json.dumps(
        {
            "DocumentIncarnation": 7,
            "NewTopLevel": True,
            "Events": [
                {
                    "EventId": "x1",
                    "EventType": "Hibernate",
                    "EventStatus": "Scheduled",
                    "Resources": ["vm"],
                    "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT",
                    "FutureField": {"a": 1},
                }
            ],
        }
    )
    (event,) = parse_document(text).events
    assert event.event_type == "Hibernate"
    assert not event.known_type
    assert event.extra == {"FutureField": {"a": 1}}


def test_malformed_event_is_skipped_and_the_rest_kept() -> None:
    text = json.dumps(
        {
            "DocumentIncarnation": 3,
            "Events": [
                {"EventType": "Preempt", "EventStatus": "Scheduled"},  # no EventId
                "not an object",
                {
                    "EventId": "ok",
                    "EventType": "Reboot",
                    "EventStatus": "Scheduled",
                    "Resources": ["vm"],
                    "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT",
                },
            ],
        }
    )
    document = parse_document(text)
    assert [e.event_id for e in document.events] == ["ok"]
    assert len(document.skipped) == 2
    assert "EventId" in document.skipped[0]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "null",
        "[]",
        "{",
        '{"Events": []}',
        '{"DocumentIncarnation": "x"}',
        '{"DocumentIncarnation": true}',
        '{"DocumentIncarnation": 1, "Events": {}}',
    ],
)
def test_not_a_document(text: str) -> None:
    with pytest.raises(DocumentError):
        parse_document(text)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Mon, 19 Sep 2016 18:29:47 GMT", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)),
        ("Sat, 1 Aug 2026 05:41:02 GMT", datetime(2026, 8, 1, 5, 41, 2, tzinfo=UTC)),
        ("Mon, 19 Sep 2016 20:29:47 +0200", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)),
        ("Mon, 19 Sep 2016 13:29:47 EST", datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC)),
        ("", None),
        ("   ", None),
        ("tomorrow", None),
        ("2016-09-19T18:29:47Z", None),  # not RFC 1123: never guessed
        ("Mon, 19 Sep 2016 18:29:47 -0000", None),  # "-0000" means zone unknown (RFC 2822)
        ("Mon, 99 Sep 2016 18:29:47 GMT", None),
    ],
)
def test_not_before(raw: str, expected: datetime | None) -> None:
    assert parse_not_before(raw) == expected


def test_unreadable_not_before_means_act_now() -> None:
    text = json.dumps(
        {
            "DocumentIncarnation": 1,
            "Events": [
                {
                    "EventId": "e",
                    "EventType": "Preempt",
                    "EventStatus": "Scheduled",
                    "Resources": ["vm"],
                    "NotBefore": "soon",
                }
            ],
        }
    )
    (event,) = parse_document(text).events
    assert event.not_before is None and event.not_before_invalid


def test_format_not_before_round_trips() -> None:
    moment = datetime(2026, 11, 29, 9, 5, 1, tzinfo=UTC)
    assert format_not_before(moment) == "Sun, 29 Nov 2026 09:05:01 GMT"
    assert parse_not_before(format_not_before(moment)) == moment


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)
field_values = st.one_of(json_values, st.text(max_size=40))
events = st.dictionaries(
    st.sampled_from(
        [
            "EventId",
            "EventType",
            "EventStatus",
            "Resources",
            "NotBefore",
            "Description",
            "EventSource",
            "DurationInSeconds",
            "ResourceType",
            "Other",
        ]
    ),
    field_values,
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_never_crash(body: bytes) -> None:
    with contextlib.suppress(DocumentError):
        parse_document(body)


@settings(max_examples=300, deadline=None)
@given(
    incarnation=st.one_of(st.integers(), json_values),
    event_list=st.lists(st.one_of(events, json_values), max_size=5),
)
def test_any_json_shape_never_crashes(incarnation: object, event_list: list[object]) -> None:
    text = json.dumps({"DocumentIncarnation": incarnation, "Events": event_list})
    try:
        document = parse_document(text)
    except DocumentError:
        return
    assert len(document.events) + len(document.skipped) == len(event_list)
    for event in document.events:
        assert event.event_id and event.event_type and event.status
        assert event.not_before is None or event.not_before.tzinfo is not None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_any_not_before_text_never_crashes(raw: str) -> None:
    result = parse_not_before(raw)
    assert result is None or result.tzinfo is UTC


def test_deeply_nested_body_is_an_error_not_a_crash() -> None:
    with pytest.raises(DocumentError):
        parse_document("[" * 100_000 + "]" * 100_000)


def preempt_with(**fields: object) -> dict[str, object]:
    event: dict[str, object] = {
        "EventId": "A123BC45-1234-5678-AB90-ABCDEF123456",
        "EventStatus": "Scheduled",
        "EventType": "Preempt",
        "ResourceType": "VirtualMachine",
        "Resources": ["myspotvm"],
        "NotBefore": "Tue, 16 Mar 2021 00:58:46 GMT",
        "Description": "",
        "EventSource": "Platform",
    }
    event.update(fields)
    return event


# One odd field each: the event is kept, the oddity named, its deadline not trusted (act now),
# and its VMs read as far as they can be.
ODD_FIELDS = [
    # (field, value, resources read, resources unreadable)
    ("NotBefore", 1615856326, ("myspotvm",), False),
    ("NotBefore", {"t": 1}, ("myspotvm",), False),
    ("NotBefore", [], ("myspotvm",), False),
    ("Resources", "myspotvm", ("myspotvm",), False),
    ("Resources", "myspotvm, other_1", ("myspotvm", "other_1"), False),
    ("Resources", ["myspotvm", 7], ("myspotvm",), True),
    ("Resources", 42, (), True),
    ("Resources", {"name": "myspotvm"}, (), True),
    ("Description", 12, ("myspotvm",), False),
    ("Description", ["a"], ("myspotvm",), False),
    ("EventSource", False, ("myspotvm",), False),
    ("ResourceType", 3, ("myspotvm",), False),
    ("DurationInSeconds", "soon", ("myspotvm",), False),
]


@pytest.mark.parametrize(
    ("field", "value", "resources", "unreadable"),
    ODD_FIELDS,
    ids=[f"{case[0]}={case[1]!r}" for case in ODD_FIELDS],
)
def test_an_odd_field_keeps_the_event_and_is_named(
    field: str, value: object, resources: tuple[str, ...], unreadable: bool
) -> None:
    body = json.dumps({"DocumentIncarnation": 1, "Events": [preempt_with(**{field: value})]})
    document = parse_document(body)
    assert document.skipped == ()
    (event,) = document.events
    assert event.event_type == "Preempt" and event.status == "Scheduled"
    assert len(event.oddities) == 1 and event.oddities[0].startswith(field)
    assert event.resources == resources
    assert event.resources_unreadable is unreadable
    assert event.not_before is None and event.not_before_invalid  # act now, never guess


def test_a_documented_event_has_no_oddities() -> None:
    (event,) = parse_document(
        json.dumps({"DocumentIncarnation": 1, "Events": [preempt_with()]})
    ).events
    assert event.oddities == () and not event.resources_unreadable
    assert event.not_before == datetime(2021, 3, 16, 0, 58, 46, tzinfo=UTC)
