"""spot-rebalancer: keep GPU inference available on evictable Azure spot capacity."""

__version__ = "0.1.0"
