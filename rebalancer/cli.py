"""`rebalancer` command line: agent | controller | demo | sim ... | simulate | version.

Settings come from flags and `REBALANCER_*` variables (pydantic-settings); a bad value stops the
process at start with one line naming the setting.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, CliSettingsSource
from pydantic_settings.exceptions import SettingsError

from rebalancer import __version__
from rebalancer.config import (
    AgentSettings,
    ControllerSettings,
    describe_error,
    describe_settings_error,
)

S = TypeVar("S", bound=BaseSettings)


def _settings_parser(
    subparsers: Any, name: str, settings_cls: type[BaseSettings], help_text: str
) -> CliSettingsSource[Any]:
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    return CliSettingsSource(
        settings_cls, root_parser=parser, cli_kebab_case=True, cli_implicit_flags=True
    )


def _load(settings_cls: type[S], source: CliSettingsSource[Any], args: argparse.Namespace) -> S:
    try:
        return settings_cls(_cli_settings_source=source(parsed_args=args))
    except ValidationError as error:
        print(f"rebalancer: {describe_error(error)}", file=sys.stderr)
        raise SystemExit(2) from None
    except SettingsError as error:  # a JSON value that does not decode
        print(f"rebalancer: {describe_settings_error(error)}", file=sys.stderr)
        raise SystemExit(2) from None


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, CliSettingsSource[Any]]]:
    parser = argparse.ArgumentParser(
        prog="rebalancer",
        description="Keep GPU inference available on evictable Azure spot capacity.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    sources = {
        "agent": _settings_parser(
            commands, "agent", AgentSettings, "Publish this VM's Scheduled Events on its Node."
        ),
        "controller": _settings_parser(
            commands,
            "controller",
            ControllerSettings,
            "Cordon, surge, fail over and drain nodes that are being evicted.",
        ),
    }
    commands.add_parser("version", help="Print the version.")
    demo = commands.add_parser("demo", help="Run the demo on an emulated cluster.")
    demo.add_argument("--notice-seconds", type=float, default=30.0)
    sim = commands.add_parser("sim", help="Emulators for tests and demos.")
    sim_commands = sim.add_subparsers(dest="sim_command", metavar="EMULATOR")
    imds = sim_commands.add_parser("imds", help="Serve an IMDS Scheduled Events emulator.")
    imds.add_argument("--host", default="127.0.0.1")
    imds.add_argument("--port", type=int, default=8169)
    serve = sim_commands.add_parser(
        "serve", help="Serve an emulated AKS cluster (Kubernetes API + IMDS) from a scenario."
    )
    serve.add_argument("scenario", metavar="SCENARIO", help="a scenario file or shipped name")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="API port (0: any free port)")
    serve.add_argument("--imds-port", type=int, default=0, help="IMDS port (0: any free port)")
    serve.add_argument("--kubeconfig-dir", default=None, help="where to write the kubeconfig")
    from rebalancer.simulate.files import add_arguments

    simulate = commands.add_parser(
        "simulate",
        help="Replay spot capacity traces through the planner: availability and cost per policy.",
        description="Replay spot capacity traces through the controller's planner on a virtual "
        "clock and report availability and cost per policy (docs/simulate.md).",
    )
    add_arguments(simulate)
    return parser, sources


def main(argv: Sequence[str] | None = None) -> int:
    parser, sources = build_parser()
    args = parser.parse_args(argv)
    if args.command == "version":
        print(f"rebalancer {__version__}")
        return 0
    if args.command == "agent":
        from rebalancer.agent.main import run_agent

        return run_agent(_load(AgentSettings, sources["agent"], args))
    if args.command == "controller":
        from rebalancer.controller.main import run_controller

        return run_controller(_load(ControllerSettings, sources["controller"], args))
    if args.command == "demo":
        from rebalancer.demo import run_demo

        return run_demo(notice_seconds=args.notice_seconds)
    if args.command == "simulate":
        from rebalancer.simulate.files import run

        return run(args)
    if args.command == "sim" and args.sim_command == "imds":
        from rebalancer.sim.serve import serve_imds

        return serve_imds(host=args.host, port=args.port)
    if args.command == "sim" and args.sim_command == "serve":
        from rebalancer.sim.serve import serve_cluster

        return serve_cluster(
            args.scenario,
            host=args.host,
            port=args.port,
            imds_port=args.imds_port,
            kubeconfig_dir=args.kubeconfig_dir,
        )
    parser.print_help()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
