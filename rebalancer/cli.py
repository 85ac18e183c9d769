"""`rebalancer` command line: agent | controller | demo | sim ... | simulate | version.

Settings come from flags and `REBALANCER_*` variables (pydantic-settings); a bad value stops the
process at start with one line naming the setting.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, CliSettingsSource
from pydantic_settings.exceptions import SettingsError

from rebalancer import __version__
from rebalancer.config import (
    AgentSettings,
    describe_error,
    describe_settings_error,
    flat_model,
)
from rebalancer.controller.settings import ControllerSettings

S = TypeVar("S", bound=BaseSettings)

# The developer package (sim/ in the repository): the cluster emulator, the IMDS emulator, the demo.
DEV_PACKAGE = "rebalancer_sim"
DEV_COMMANDS = {
    "demo": "Run the demo on an emulated cluster (developer package; not in the image).",
    "sim": "Emulators for tests and demos (developer package; not in the image).",
}


def _settings_parser(
    subparsers: Any, name: str, settings_cls: type[BaseSettings], help_text: str
) -> CliSettingsSource[Any]:
    parser = subparsers.add_parser(name, help=help_text, description=help_text)
    # The flags of the flat view (--return-quiet-seconds), not --planner.returns.quiet-seconds.
    return CliSettingsSource(
        flat_model(settings_cls), root_parser=parser, cli_kebab_case=True, cli_implicit_flags=True
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
    # The emulator and the demo live in the developer package (sim/ in the repository), which the
    # container image does not ship: listed here for --help, parsed and run by rebalancer_sim.cli.
    for name, help_text in DEV_COMMANDS.items():
        commands.add_parser(name, help=help_text, add_help=False)
    from rebalancer.simulate.files import add_arguments

    simulate = commands.add_parser(
        "simulate",
        help="Replay spot capacity traces through the planner: availability and cost per policy.",
        description="Replay spot capacity traces through the controller's planner on a virtual "
        "clock and report availability and cost per policy (docs/simulate.md).",
    )
    add_arguments(simulate)
    return parser, sources


def _run_dev_command(argv: list[str]) -> int:
    """Hand `demo` and `sim ...` to the developer package, or say in one line that it is absent.

    Imported by name at run time, not statically: the product never imports the emulator (an
    import-linter contract checks it), and the image that runs in clusters does not contain it.
    """
    try:
        dev_cli = importlib.import_module(DEV_PACKAGE + ".cli")
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != DEV_PACKAGE:
            raise
        print(
            f"rebalancer: `{argv[0]}` is a developer command, not in this image or install: it "
            "needs the package spot-rebalancer-sim (sim/ in the repository, which "
            "scripts/bootstrap installs)",
            file=sys.stderr,
        )
        return 2
    result: int = dev_cli.main(argv)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in DEV_COMMANDS:
        return _run_dev_command(arguments)
    parser, sources = build_parser()
    args = parser.parse_args(arguments)
    if args.command == "version":
        print(f"rebalancer {__version__}")
        return 0
    if args.command == "agent":
        from rebalancer.agent.main import run_agent

        return run_agent(_load(AgentSettings, sources["agent"], args))
    if args.command == "controller":
        from rebalancer.controller.main import run_controller

        return run_controller(_load(ControllerSettings, sources["controller"], args))
    if args.command == "simulate":
        from rebalancer.simulate.files import run

        return run(args)
    parser.print_help()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
