"""The simulator's only file I/O: traces, the YAML scenario, a price file; the command itself.

Every problem with an input becomes an InputError naming the file and the problem; `run`
prints it and returns 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from rebalancer.azure.prices import BUNDLED, PriceFileError, PriceTable, parse_price_file
from rebalancer.simulate import InputError
from rebalancer.simulate.engine import simulate
from rebalancer.simulate.policies import DEFAULT_POLICIES, POLICIES, UNAVAILABLE
from rebalancer.simulate.report import describe, table, to_html, to_json
from rebalancer.simulate.trace import MAX_TRACE_BYTES, Trace, parse_trace
from rebalancer.simulate.workload import CHOICES, KEYS, Scenario, prices_for, scenario_from

MAX_TRACES = 1000  # pools in one simulation: the public data set has 14 traces
MAX_CONFIG_BYTES = 1024 * 1024  # a scenario file is a few lines


def _read(path: Path, what: str, *, limit: int | None = None) -> str:
    """The file's text; with `limit`, more bytes than that is an InputError (read no further:
    a trace path may name anything, /dev/zero included)."""
    try:
        with path.open("rb") as file:
            raw = file.read() if limit is None else file.read(limit + 1)
        if limit is not None and len(raw) > limit:
            raise InputError(f"{path}: {what} larger than {limit} bytes")
        return raw.decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: {what} not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: a folder, expected a {what} file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read {what}: {error}") from None


def load_traces(paths: Sequence[Path]) -> list[Trace]:
    """Files as given; a folder contributes every `*.json` below it, in name order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(path.rglob("*.json"))
            if not found:
                raise InputError(f"{path}: folder holds no *.json trace")
            files += found
        else:
            files.append(path)
    if len(files) > MAX_TRACES:
        raise InputError(f"{len(files)} trace files, more than {MAX_TRACES} (pools)")
    return [
        parse_trace(_read(f, "trace", limit=MAX_TRACE_BYTES), source=str(f), name=f.stem)
        for f in files
    ]


class _NoAliases(yaml.SafeLoader):
    """YAML without anchors and aliases: a scenario needs none, and a few aliased lines expand
    into gigabytes once the value is walked or printed in a message ("billion laughs")."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, "an alias (*name): not allowed", mark)
        return super().compose_node(parent, index)


def load_config(path: Path) -> dict[str, Any]:
    try:
        data = yaml.load(_read(path, "config", limit=MAX_CONFIG_BYTES), Loader=_NoAliases)
    except yaml.YAMLError as error:
        # PyYAML's message spans lines (the mark and a caret): one line here.
        raise InputError(f"{path}: not YAML: {' '.join(str(error).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of settings")
    return data


def load_prices(path: Path) -> PriceTable:
    try:
        return parse_price_file(_read(path, "price file")).merged_over(BUNDLED)
    except PriceFileError as error:
        raise InputError(f"{path}: {error}") from None


def _finite(text: str) -> float:
    """A number flag: float() also reads nan and inf, which no setting means."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="FILE|DIR",
        help="a spot capacity trace (one pool); repeat, or give a folder",
    )
    parser.add_argument("--config", metavar="FILE", help="YAML with any setting below")
    policies = ", ".join([*POLICIES, *(f"{p} (not yet)" for p in UNAVAILABLE)])
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="NAME",
        help=f"repeatable; default: all that exist ({policies})",
    )
    parser.add_argument("--replicas", type=int)
    parser.add_argument("--gpus-per-replica", type=int)
    for name in ("load", "shutdown", "notice", "on-demand-provision", "spot-provision"):
        parser.add_argument(
            f"--{name}-seconds",
            metavar="DIST",
            help="90 | uniform:A:B | normal:M:SD | lognormal:MED:S | choice:V@W,..",
        )
    parser.add_argument("--grace-seconds", type=int)
    parser.add_argument("--on-demand-limit", type=int, help="on-demand nodes at most")
    parser.add_argument("--scale-down-seconds", type=_finite)
    parser.add_argument("--vm-size")
    parser.add_argument("--region")
    parser.add_argument("--gpus-per-node", type=int)
    parser.add_argument("--hedge-spare", type=int, help="spothedge: spare spot replicas (k)")
    parser.add_argument(
        "--fallback-spare", type=int, help="dynamic-fallback: k in N + k spot replicas (default 2)"
    )
    parser.add_argument(
        "--spot-pool-min-nodes", type=int, help="each spot pool's minimum node count (default 0)"
    )
    parser.add_argument(
        "--on-demand-pool-min-nodes", type=int, help="the on-demand pool's minimum (default 0)"
    )
    parser.add_argument(
        "--max-node-provision-seconds",
        type=float,
        help="a spot request without capacity fails after this (autoscaler default 900)",
    )
    for bound, seconds in (("initial", 300), ("max", 1800)):
        parser.add_argument(
            f"--{bound}-backoff-seconds",
            type=float,
            help=f"autoscaler's {bound}-node-group-backoff-duration (default {seconds})",
        )
    parser.add_argument(
        "--spot-capacity-known",
        action="store_true",
        default=None,
        help="the autoscaler asks only spot pools with capacity (default: a request finds out)",
    )
    parser.add_argument(
        "--multi-region",
        action="store_true",
        default=None,
        help="pools of several regions (from the trace names) as one cluster",
    )
    parser.add_argument(
        "--price-region",
        action="append",
        default=[],
        metavar="TRACE_REGION=REGION",
        help="price a trace region's spot pools as this price-table region (repeatable)",
    )
    policy = "eviction-aware: the workload's spot-rebalancer.io/"
    for name, default in (("max-risk", "low"), ("spread", "zone"), ("failover-to", "on-demand")):
        words = "|".join(CHOICES[name.replace("-", "_")])
        parser.add_argument(f"--{name}", metavar=words, help=f"{policy}{name} (default {default})")
    parser.add_argument("--min-on-demand", type=int, help=f"{policy}min-on-demand (default 0)")
    parser.add_argument("--spare-replicas", type=int, help=f"{policy}spare-replicas (default 0)")
    parser.add_argument(
        "--availability-target",
        metavar="PERCENT",
        help="target: the workload's spot-rebalancer.io/availability-target (default 99.9)",
    )
    parser.add_argument("--seed", type=int)
    controller = [
        f"{name}-seconds"
        for name in ("deadline-margin", "cooldown", "return-quiet", "return-pending-timeout")
    ]
    controller += [
        "risk-prior-rate-per-hour",
        "risk-prior-weight-hours",
        "risk-history-half-life-seconds",
        "risk-medium-rate-per-hour",
        "risk-high-rate-per-hour",
    ]
    for name in controller:
        env = "REBALANCER_" + name.upper().replace("-", "_")
        parser.add_argument(
            f"--{name}", type=_finite, help=f"the controller's {env} (default: its own)"
        )
    parser.add_argument("--prices", metavar="FILE", help="price file (default: bundled table)")
    parser.add_argument("--days", type=_finite, help="simulate only the first DAYS of the traces")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")


def _price_regions(pairs: Sequence[str]) -> dict[str, str]:
    regions = {}
    for pair in pairs:
        trace_region, equals, region = pair.partition("=")
        if not equals or not trace_region or not region:
            raise InputError(f"--price-region {pair!r}: expected TRACE_REGION=REGION")
        regions[trace_region] = region
    return regions


def _flag_values(args: argparse.Namespace) -> dict[str, Any]:
    values = {}
    for name in KEYS.values():
        value = getattr(args, name, None)
        if value is not None:
            values[name] = value
    return values


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        return _run(args, out=out, err=err)
    except InputError as error:
        print(f"rebalancer simulate: {error}", file=err)
        return 2


def _run(args: argparse.Namespace, *, out: TextIO, err: TextIO) -> int:
    config: Mapping[str, Any] = {}
    base_dir = Path.cwd()
    if args.config:
        config_path = Path(args.config)
        config = load_config(config_path)
        base_dir = config_path.parent
    settings = {k: v for k, v in config.items() if k not in ("traces", "policies", "prices")}
    scenario = scenario_from(settings, source=str(args.config or "config"), base=Scenario())
    scenario = scenario_from(_flag_values(args), source="flags", base=scenario)
    trace_paths = [Path(p) for p in args.trace]
    if not trace_paths:
        listed = config.get("traces") or []
        if not isinstance(listed, list):
            raise InputError(f"{args.config}: traces must be a list of files or folders")
        trace_paths = [base_dir / str(p) for p in listed]
    policies = list(args.policy) or list(config.get("policies") or DEFAULT_POLICIES)
    price_file = args.prices or config.get("prices")
    table_source = (
        load_prices(base_dir / str(price_file) if not args.prices else Path(price_file))
        if price_file
        else BUNDLED
    )
    prices = prices_for(scenario, table_source, regions=_price_regions(args.price_region))
    traces = load_traces(trace_paths)
    horizon = None
    if args.days is not None:
        if args.days <= 0:
            raise InputError(f"--days {args.days}: must be positive")
        horizon = args.days * 86400
        shortest = min((t.seconds for t in traces), default=horizon)
        if horizon > shortest:
            raise InputError(f"--days {args.days}: the traces cover {shortest / 86400:.1f} days")
    results = simulate(policies, traces=traces, scenario=scenario, prices=prices, horizon=horizon)
    span = results[0].horizon
    cut = [t for t in traces if t.seconds > span + t.gap_seconds]
    if cut and horizon is None:
        print(
            "note: simulating the span every trace covers "
            f"({span / 86400:.1f} days); cut: " + ", ".join(t.name for t in cut),
            file=err,
        )
    if args.json:
        print(
            to_json(results, traces=traces, scenario=scenario, prices=prices, horizon=span),
            file=out,
        )
    else:
        print(describe(traces, scenario, prices, span, policies), file=out)
        print(table(results, markdown=args.markdown), file=out)
    if args.html:
        page = to_html(results, traces=traces, scenario=scenario, prices=prices, horizon=span)
        try:
            Path(args.html).write_text(page, encoding="utf-8")
        except OSError as error:
            raise InputError(f"{args.html}: cannot write the HTML report: {error}") from None
    return 0
