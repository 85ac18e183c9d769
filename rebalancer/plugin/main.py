"""`kubectl spot-rebalancer status | doctor`: the command line of the kubectl plugin.

Installed with the package as `kubectl-spot_rebalancer` (kubectl finds plugins on PATH; a dash
in the command is an underscore in the file name). kubectl passes the user's environment, so
`$KUBECONFIG` works; `--kubeconfig`, `--context` and `-n/--namespace` (spot-rebalancer's
namespace; found by its chart's labels when not given) work as they do for kubectl, given after
`kubectl spot-rebalancer` (kubectl hands a plugin everything after its name), before or after
`status` / `doctor`. Exit codes: 0; 1 when `doctor` finds an error; 2 when the cluster could not be
read or the command line is wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rebalancer import __version__
from rebalancer.clock import Clock, SystemClock
from rebalancer.kube.client import KubeClient
from rebalancer.kube.errors import KubeError
from rebalancer.plugin import doctor, status
from rebalancer.plugin.gather import ReadFailed, gather
from rebalancer.plugin.terminal import printable
from rebalancer.plugin.view import View, build_view

PROG = "kubectl spot-rebalancer"
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
        choices=("text", "json"),
        default=argparse.SUPPRESS if suppress else "text",
        help="text (default) or json, for scripts.",
    )
    parser.add_argument(
        "--prices",
        default=default,
        help="A price file (the controller's format) over the bundled prices and the "
        "controller's own file.",
    )
    return parser


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


async def read_view(args: argparse.Namespace, clock: Clock, prices: str | None) -> View:
    client = await KubeClient.connect(args.kubeconfig, context=args.context, timeout_seconds=30)
    try:
        raw = await gather(client, args.namespace)
    finally:
        await client.close()
    return build_view(raw, now=clock.now(), namespace=args.namespace, prices_file=prices)


def run(args: argparse.Namespace, clock: Clock) -> int:
    try:
        prices = Path(args.prices).read_text() if args.prices else None
        view = asyncio.run(read_view(args, clock, prices))
    except (ReadFailed, KubeError, OSError, ValueError) as error:
        print(f"{PROG}: {printable(str(error))}", file=sys.stderr)
        return 2
    except Exception as error:  # a kubeconfig that does not load, and the like: one line
        print(
            f"{PROG}: cannot read the cluster: {type(error).__name__}: {printable(str(error))}",
            file=sys.stderr,
        )
        return 2
    if args.command == "status":
        document = status.status_of(view)
        text = status.render(document)
        code = 0
    else:
        findings = doctor.findings_of(view)
        document = doctor.report(view, findings)
        text = doctor.render(document)
        code = 1 if doctor.failed(findings) else 0
    if args.output == "json":
        # ensure_ascii (the default) writes every control character as \uXXXX: inert on a
        # terminal, the same value to a JSON reader.
        print(json.dumps(document, indent=2, ensure_ascii=True))
    else:
        print(text, end="")
    return code


def main(argv: Sequence[str] | None = None, clock: Clock | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "version":
        print(f"kubectl-spot_rebalancer {__version__}")
        return 0
    return run(args, clock or SystemClock())


if __name__ == "__main__":
    raise SystemExit(main())
