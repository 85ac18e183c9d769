"""`rebalancer demo` and `rebalancer sim ...`: the developer commands of the emulator package.

The product's CLI (`rebalancer.cli`) hands these two commands here when this package is installed
(a clone after scripts/bootstrap); the container image does not contain it. `argv` starts with the
command name (`demo` or `sim`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def port(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535: argparse's one-line error otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0 to 65535)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rebalancer")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo = commands.add_parser("demo", help="Run the demo on an emulated cluster.")
    demo.add_argument("--notice-seconds", type=float, default=30.0)
    demo.add_argument(
        "--keep",
        action="store_true",
        help="afterwards, keep the cluster, its agents and its controller running to explore",
    )
    sim = commands.add_parser("sim", help="Emulators for tests and demos.")
    sim_commands = sim.add_subparsers(dest="sim_command", metavar="EMULATOR", required=True)
    imds = sim_commands.add_parser("imds", help="Serve an IMDS Scheduled Events emulator.")
    imds.add_argument("--host", default="127.0.0.1")
    imds.add_argument("--port", type=port, default=8169)
    serve = sim_commands.add_parser(
        "serve", help="Serve an emulated AKS cluster (Kubernetes API + IMDS) from a scenario."
    )
    serve.add_argument("scenario", metavar="SCENARIO", help="a scenario file or shipped name")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port, default=0, help="API port (0: any free port)")
    serve.add_argument("--imds-port", type=port, default=0, help="IMDS port (0: any free port)")
    serve.add_argument("--kubeconfig-dir", default=None, help="where to write the kubeconfig")
    serve.add_argument(
        "--with-rebalancer",
        action="store_true",
        help="also run the agents (one per spot node) and the controller against the cluster",
    )
    return parser


def main(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from rebalancer_sim.demo import run_demo

        return run_demo(notice_seconds=args.notice_seconds, keep=args.keep)
    if args.sim_command == "imds":
        from rebalancer_sim.serve import serve_imds

        return serve_imds(host=args.host, port=args.port)
    if args.sim_command == "serve":
        from rebalancer_sim.serve import serve_cluster

        return serve_cluster(
            args.scenario,
            host=args.host,
            port=args.port,
            imds_port=args.imds_port,
            kubeconfig_dir=args.kubeconfig_dir,
            with_rebalancer=args.with_rebalancer,
        )
    raise AssertionError(f"unhandled command {args}")  # argparse requires one of the above
