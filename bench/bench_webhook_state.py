"""The admission webhook's own state under a flood of valid reviews: flat, not growing.

The webhook remembers its recent placements (to spread a burst before the caches show its
pods); everything in that memory that a client sends is its review's uid. This answers
`--reviews` placements in process (no HTTP: the state is the question), each with a uid of the
longest length accepted (128 characters), at a virtual `--rate` per second, and prints how many
placements are remembered and the process's resident memory at checkpoints (about 40 s).

    .venv/bin/python -m bench.bench_webhook_state [--reviews 30000] [--rate 1000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import time
from pathlib import Path

import structlog

from bench.bench_webhook import review, world
from rebalancer.controller.admission import MAX_UID_LENGTH
from rebalancer.controller.webhook import MAX_RECENT, RECENT_SECONDS, PlacementWebhook
from rebalancer.metrics import ControllerMetrics


def rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return (
        next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        / 1024
    )


def run(reviews: int, rate: float) -> None:
    view = world(1000, 100)
    view.groups  # noqa: B018 - built once, before measuring
    now = dt.datetime.now(dt.UTC)
    clock = {"now": now}
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    hook = PlacementWebhook(
        lambda: view, metrics=ControllerMetrics(), now=lambda: clock["now"],
        log=structlog.get_logger(),
    )  # fmt: skip
    checkpoints = {reviews * k // 6 for k in range(1, 7)}
    gc.collect()
    base = rss_mib()
    started = time.perf_counter()
    print(
        f"{reviews} placements at {rate:g}/s (virtual), uids of {MAX_UID_LENGTH} characters; "
        f"remembered: at most {MAX_RECENT}, for {RECENT_SECONDS:g} s"
    )
    for index in range(1, reviews + 1):
        body = review(index, f"model{index % 100:03d}")
        body["request"]["uid"] = f"{index:0{MAX_UID_LENGTH}d}"
        hook.answer(body)
        clock["now"] = now + dt.timedelta(seconds=index / rate)
        if index in checkpoints:
            gc.collect()
            print(
                f"after {index:>7} ({index / rate:6.1f} s virtual): {len(hook.admitted):>6} "
                f"remembered, resident memory {rss_mib():6.1f} MiB ({base:.1f} before)"
            )
    elapsed = time.perf_counter() - started
    print(f"{reviews / elapsed:.0f} reviews/s answered in process")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reviews", type=int, default=30_000)
    parser.add_argument("--rate", type=float, default=1000.0)
    args = parser.parse_args()
    if not 1 <= args.reviews <= 1_000_000 or args.rate <= 0:
        parser.error("--reviews: 1 to 1000000; --rate > 0")
    run(args.reviews, args.rate)


if __name__ == "__main__":
    main()
