"""The plugin shows what the cluster wrote and never lets a terminal obey it (issue 18, item 8).

Escape sequences planted where a tenant, an agent or anyone with write access to a Lease can
write: the Lease holder, a surge record's event ids, a return record's pool, a controller setting
(its refusal is quoted under NOTES), a problem message. The text forms carry no control character
at all but their own line breaks, and show each planted one as `\\xNN`; `-o json` carries none
either and still gives the exact value back.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from rebalancer import names
from rebalancer.controller.records import ReturnRecord, Surge
from rebalancer.plugin import doctor, main, status
from rebalancer.plugin.terminal import printable, printable_document
from rebalancer.plugin.view import View, build_view
from tests.unit.kube_objects import deployment
from tests.unit.test_plugin import ENV, NOW, controller, raw

TITLE = "\x1b]0;owned\x07"  # OSC: set the terminal's title
CLEAR = "\x1b[2J\x1b[H"  # CSI: clear the screen, cursor home
C1_CLEAR = "\x9b2J"  # the same with the 8-bit CSI
FORGED_LINE = "\rok\n- all good\x7f"
SPOT = "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"
GPU = "sku=gpu:NoSchedule"


def allowed(text: str) -> bool:
    """Only printable characters, and line breaks."""
    return not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in text)


def hostile_view() -> View:
    surge = Surge(base_replicas=3, added=1, event_ids=(f"E1{TITLE}",),
                  doomed_pods=("inference/llm-1",), deadline="2026-03-01T12:00:30Z")  # fmt: skip
    back = ReturnRecord(base_replicas=2, retire=f"inference/old{FORGED_LINE}",
                        pool=f"gpuspot{C1_CLEAR}", started_at="2026-03-01T11:00:00Z",
                        known_pods=())  # fmt: skip
    llm = deployment("llm", [SPOT, GPU], replicas=3,
                     annotations={names.SURGE_ANNOTATION: surge.to_json()})  # fmt: skip
    chat = deployment("chat", [SPOT, GPU], replicas=2,
                      annotations={names.RETURN_ANNOTATION: back.to_json()})  # fmt: skip
    env = {**ENV, "REBALANCER_COOLDOWN_SECONDS": f"-1{CLEAR}"}
    lease = {"spec": {"holderIdentity": f"sr-controller-0{CLEAR}{TITLE}",
                      "renewTime": "2026-03-01T11:59:58.000000Z"}}  # fmt: skip
    return build_view(
        raw(deployments=[llm, chat, controller(env=env)], lease=lease,
            problems=(f"cannot list daemonsets: {CLEAR}",)),
        now=NOW, namespace=None,
    )  # fmt: skip


def test_escapes_every_c0_c1_and_del() -> None:
    every = "".join(map(chr, [*range(0x20), *range(0x7F, 0xA0)]))
    shown = printable(f"a{every}z")
    assert allowed(shown) and "\n" not in shown
    assert shown.startswith("a\\x00\\x01") and shown.endswith("\\x9e\\x9fz")
    assert printable("plain ünïcode ✓ \\") == "plain ünïcode ✓ \\"
    assert printable_document(
        {"k\x1b": [("x\n",)], "yaml": "a:\n  b\x1b\n"}, multiline={"yaml"}
    ) == {
        "k\\x1b": [["x\\x0a"]],
        "yaml": "a:\n  b\\x1b\n",
    }


def test_status_text_shows_escape_sequences_and_obeys_none() -> None:
    document = status.status_of(hostile_view())
    text = status.render(document)
    assert allowed(text)
    assert "leader sr-controller-0\\x1b[2J\\x1b[H\\x1b]0;owned\\x07" in text
    assert "E1\\x1b]0;owned\\x07" in text  # the surge's event id
    assert "to spot pool gpuspot\\x9b2J" in text and "old\\x0dok\\x0a- all good\\x7f" in text
    assert "cannot list daemonsets: \\x1b[2J" in text
    assert "cooldown_seconds" in text  # the refused setting, said
    # Every line is ours: the forged one did not start a line of its own.
    assert not any(line.startswith("- all good") for line in text.splitlines())
    # The document itself keeps the values as they are, for -o json.
    assert document["install"]["leader"]["identity"] == f"sr-controller-0{CLEAR}{TITLE}"


def test_doctor_text_shows_escape_sequences_and_obeys_none() -> None:
    view = hostile_view()
    text = doctor.render(doctor.report(view, doctor.findings_of(view)))
    assert allowed(text)
    assert "- cannot list daemonsets: \\x1b[2J\\x1b[H" in text


@pytest.mark.parametrize("output", ["text", "json"])
@pytest.mark.parametrize("command", ["status", "doctor"])
def test_the_command_line_prints_nothing_a_terminal_obeys(
    output: str, command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def read_view(*_: Any) -> View:
        return hostile_view()

    monkeypatch.setattr(main, "read_view", read_view)
    main.main([command, "-o", output])
    out = capsys.readouterr().out
    assert allowed(out)
    if output == "json":
        document = json.loads(out)  # the exact values, for scripts
        assert f"cannot list daemonsets: {CLEAR}" in document["problems"]
        if command == "status":
            assert document["install"]["leader"]["identity"] == f"sr-controller-0{CLEAR}{TITLE}"
            assert document["surges"][0]["eventIds"] == [f"E1{TITLE}"]
    else:
        assert "\\x1b[2J" in out


def test_an_error_message_from_the_cluster_is_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def read_view(*_: Any) -> View:
        raise ValueError(f"the server said {CLEAR}{TITLE}")

    monkeypatch.setattr(main, "read_view", read_view)
    assert main.main(["status"]) == 2
    err = capsys.readouterr().err
    assert allowed(err) and "the server said \\x1b[2J" in err
