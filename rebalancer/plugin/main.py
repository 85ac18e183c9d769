"""`kubectl spot-rebalancer status | doctor`: the command line of the kubectl plugin.

Installed with the package as `kubectl-spot_rebalancer` (kubectl finds plugins on PATH; a dash
in the command is an underscore in the file name). kubectl passes the user's environment, so
`$KUBECONFIG` works; `--kubeconfig`, `--context` and `-n/--namespace` (spot-rebalancer's
namespace; found by its chart's labels when not given) work as they do for kubectl, given after
`kubectl spot-rebalancer` (kubectl hands a plugin everything after its name), before or after
`status` / `doctor`. Output as kubectl's: `-o text|wide|json|yaml`, `--no-headers`, and
`-w/--watch`, which reads again every `--watch-interval` seconds (one list of each kind per read,
never more) and prints again when what it shows changed (countdowns aside), until Ctrl-C (exit 0).
Exit codes: 0; 1 when `doctor` finds an error; 2 when the cluster could not be read or the command
line is wrong. While watching, a read that fails is said on stderr and tried again with fresh
credentials.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from rebalancer import __version__
from rebalancer.clock import Clock, SystemClock
from rebalancer.kube.client import KubeClient
from rebalancer.kube.errors import KubeError
from rebalancer.plugin import doctor, status
from rebalancer.plugin.gather import ReadFailed, gather
from rebalancer.plugin.terminal import printable
from rebalancer.plugin.view import View, build_view
from rebalancer.process import sleep_or_stop

PROG = "kubectl spot-rebalancer"
OUTPUTS = ("text", "wide", "json", "yaml")
MIN_WATCH_INTERVAL_SECONDS = 0.5
# Fields that change at every read without anything changing in the cluster: a watch does not
# print again for them alone.
COUNTDOWNS = frozenset({"time", "secondsLeft", "secondsAgo", "renewed"})
COMMANDS = {
    "status": "Pools and their eviction risk, managed workloads per pool, notices, surges, "
    "returns, spend and savings.",
    "doctor": "Misconfigurations of the spot GPU setup, each with what to change and the YAML.",
    "version": "Print the version.",
}


def _common(suppress: bool) -> argparse.ArgumentParser:
    """kubectl's flags, accepted before and after the command (after wins)."""
    default: Any = argparse.SUPPRESS if suppress else None
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kubeconfig", default=default, help="Path of the kubeconfig to use.")
    parser.add_argument("--context", default=default, help="The kubeconfig context to use.")
    parser.add_argument(
        "-n",
        "--namespace",
        default=default,
        help="spot-rebalancer's namespace (default: found by its chart's labels).",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default=argparse.SUPPRESS if suppress else "text",
        help="text (default); wide: more columns; json or yaml: the whole document, for scripts.",
    )
    parser.add_argument(
        "--no-headers",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="Text without the tables' heading rows (and the doctor's summary line).",
    )
    parser.add_argument(
        "-w",
        "--watch",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="Keep reading and print again when something changes; Ctrl-C stops.",
    )
    parser.add_argument(
        "--watch-interval",
        type=_interval,
        default=argparse.SUPPRESS if suppress else 5.0,
        metavar="SECONDS",
        help="With --watch: seconds between reads (default 5; one list of each kind per read).",
    )
    parser.add_argument(
        "--prices",
        default=default,
        help="A price file (the controller's format) over the bundled prices and the "
        "controller's own file.",
    )
    return parser


def _interval(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not seconds >= MIN_WATCH_INTERVAL_SECONDS:
        raise argparse.ArgumentTypeError(f"at least {MIN_WATCH_INTERVAL_SECONDS:g} seconds")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        parents=[_common(suppress=False)],
        description="What spot-rebalancer sees in this cluster, and what is misconfigured.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, help_text in COMMANDS.items():
        commands.add_parser(
            name, parents=[_common(suppress=True)], help=help_text, description=help_text
        )
    return parser


async def connect(args: argparse.Namespace) -> KubeClient:
    return await KubeClient.connect(args.kubeconfig, context=args.context, timeout_seconds=30)


async def read_view(
    args: argparse.Namespace, clock: Clock, prices: str | None, client: KubeClient | None = None
) -> View:
    """One read of everything the commands show; with a client of its own unless given one."""
    own = client is None
    client = client or await connect(args)
    try:
        raw = await gather(client, args.namespace)
    finally:
        if own:
            await client.close()
    return build_view(raw, now=clock.now(), namespace=args.namespace, prices_file=prices)


def shown(args: argparse.Namespace, view: View) -> tuple[dict[str, Any], str, int]:
    """The document, its text as asked (`-o`, `--no-headers`), and the exit code."""
    headers = not args.no_headers
    if args.command == "status":
        document = status.status_of(view)
        text = status.render(document, wide=args.output == "wide", headers=headers)
        return document, text, 0
    findings = doctor.findings_of(view)
    document = doctor.report(view, findings)
    return document, doctor.render(document, headers=headers), 1 if doctor.failed(findings) else 0


def formatted(output: str, document: dict[str, Any], text: str) -> str:
    # Both escape every control character the cluster wrote (JSON as \uXXXX; YAML, without
    # allow_unicode, as \e, \x85 and the like): inert on a terminal, the same value to a reader.
    if output == "json":
        return json.dumps(document, indent=2, ensure_ascii=True) + "\n"
    if output == "yaml":
        return yaml.safe_dump(document, sort_keys=False, allow_unicode=False)
    return text


def without_countdowns(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_countdowns(v) for k, v in value.items() if k not in COUNTDOWNS}
    if isinstance(value, list):
        return [without_countdowns(v) for v in value]
    return value


def _prices(args: argparse.Namespace) -> str | None:
    return Path(args.prices).read_text() if args.prices else None


def run(args: argparse.Namespace, clock: Clock) -> int:
    try:
        prices = _prices(args)
        if args.watch:
            return asyncio.run(watch(args, clock, prices, sys.stdout))
        view = asyncio.run(read_view(args, clock, prices))
    except KeyboardInterrupt:  # Ctrl-C before the watch's own handler is in place
        return 0 if args.watch else 130
    except (ReadFailed, KubeError, OSError, ValueError) as error:
        print(f"{PROG}: {printable(str(error))}", file=sys.stderr)
        return 2
    except Exception as error:  # a kubeconfig that does not load, and the like: one line
        print(
            f"{PROG}: cannot read the cluster: {type(error).__name__}: {printable(str(error))}",
            file=sys.stderr,
        )
        return 2
    document, text, code = shown(args, view)
    print(formatted(args.output, document, text), end="")
    return code


async def watch(args: argparse.Namespace, clock: Clock, prices: str | None, out: TextIO) -> int:
    """Read every `--watch-interval` seconds with one client (one list of each kind per read);
    print when what is shown changed. SIGINT (Ctrl-C) or SIGTERM end it with exit code 0, even
    in the middle of a read."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    client = await connect(args)
    last: Any = None
    printed = 0
    try:
        while not stop.is_set():
            reading = asyncio.ensure_future(read_view(args, clock, prices, client))
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not reading.done():
                reading.cancel()
                await asyncio.gather(reading, return_exceptions=True)
                break
            try:
                document, text, _ = shown(args, reading.result())
            except (ReadFailed, KubeError) as error:
                if last is None:
                    raise  # as kubectl get -w: what cannot be read at first is an error
                again = f"reading again in {args.watch_interval:g}s"
                print(f"{PROG}: {error}; {again}", file=sys.stderr)
                # With fresh credentials: an exec plugin's token (kubelogin's) may have expired.
                await client.close()
                client = await connect(args)
            else:
                steady = without_countdowns(document)
                if steady != last:
                    separator = "---\n" if args.output == "yaml" and printed else ""
                    blank = "\n" if args.output in ("text", "wide") and printed else ""
                    out.write(blank + separator + formatted(args.output, document, text))
                    out.flush()
                    last, printed = steady, printed + 1
            await sleep_or_stop(stop, args.watch_interval)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await client.close()
    return 0


def main(argv: Sequence[str] | None = None, clock: Clock | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "version":
        print(f"kubectl-spot_rebalancer {__version__}")
        return 0
    return run(args, clock or SystemClock())


if __name__ == "__main__":
    raise SystemExit(main())
