"""Order statistics shared by window_stats.py and stress_stats.py: the median and the
percentile they read bootstrap intervals from. Standard library only."""


def median(values):
    """The median of `values` (the mean of the middle two for an even count); 0.0 when empty."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return 0.0
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def pct(values, q):
    """The `q` quantile of `values` (0 <= q <= 1), nearest rank on the sorted values."""
    v = sorted(values)
    return v[min(len(v) - 1, max(0, int(round(q * (len(v) - 1)))))]
