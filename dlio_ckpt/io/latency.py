"""Per-request latency histograms of one process: every storage call timed into a log-bucket histogram
per operation kind, never a list of requests.

Why a histogram of our own and not HdrHistogram: the buckets here are HdrHistogram's idea (128 linear
sub-buckets per power of two of nanoseconds), the recording is one ``bit_length`` and one list increment under
a lock (about a microsecond of Python, measured in ``bench/latency_cost.py``), and a histogram travels between
processes as a small dict of its non-empty buckets, merged by adding counts: exact counts, exact sums, exact
minima and maxima, percentiles within 0.4 % (``tests/unit/test_latency.py`` holds them to it).
Memory does not grow with the requests: a kind holds at most :data:`BUCKETS` counters.

Why 0.4 %: below 128 ns a bucket is one value, exact. Above, a value v of ``bit_length`` e + 8 lies in a bucket
[low, low + 2**e) with low >= 128 * 2**e; a percentile is reported as its bucket's midpoint, low + (2**e - 1) / 2,
less than 2**(e - 1) from v, and 2**(e - 1) <= v / 256 (0.39 %). A bucket's edge could be a whole width, 1/128
(0.8 %), from v: the midpoint halves that.

Why a lock and not one histogram per thread: the engine's threads write and read concurrently, and
``counts[i] += 1`` is not atomic in CPython; a lost count would make ``count`` disagree with the files moved.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

SUB_BITS = 7  # 128 sub-buckets per power of two: a value's bucket is at most 1/128 of it wide
SUB = 1 << SUB_BITS
MAX_EXPONENT = 42  # 2**(42+8) ns, about 13 days: beyond it values share the last bucket (their max stays exact)
BUCKETS = (MAX_EXPONENT + 2) << SUB_BITS


def bucket_of(ns: int) -> int:
    """The bucket of a latency in nanoseconds: exact below 128 ns, then 128 buckets per power of two."""
    if ns < SUB:
        return max(ns, 0)
    e = ns.bit_length() - SUB_BITS - 1
    return min(((e + 1) << SUB_BITS) + (ns >> e) - SUB, BUCKETS - 1)


def bucket_bounds(index: int) -> tuple[int, int]:
    """The values (ns) a bucket holds: [low, high)."""
    if index < SUB:
        return index, index + 1
    e = (index >> SUB_BITS) - 1
    low = ((index & (SUB - 1)) | SUB) << e
    return low, low + (1 << e)


@dataclass
class Histogram:
    """One operation kind's latencies (ns) and bytes: ``counts`` holds only the non-empty buckets, so a
    histogram pickles small and merges by addition (across threads, operations and processes)."""

    counts: dict[int, int] = field(default_factory=dict)
    count: int = 0
    total_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0
    bytes: int = 0

    def add(self, other: Histogram) -> None:
        """Merge ``other`` into this one (exact: counts add, extremes compare)."""
        if not other.count:
            return
        for i, n in other.counts.items():
            self.counts[i] = self.counts.get(i, 0) + n
        self.min_ns = other.min_ns if not self.count else min(self.min_ns, other.min_ns)
        self.max_ns = max(self.max_ns, other.max_ns)
        self.count += other.count
        self.total_ns += other.total_ns
        self.bytes += other.bytes

    def quantile_ns(self, q: float) -> float:
        """The value below which a share ``q`` of the requests lie: the request of rank ceil(q * count),
        reported as its bucket's midpoint (within 0.4 % of the true value), kept within [min, max]."""
        if not self.count:
            return 0.0
        rank = max(1, min(self.count, -(-int(q * self.count * 1_000_000) // 1_000_000)))
        seen = 0
        for i in sorted(self.counts):
            seen += self.counts[i]
            if seen >= rank:
                low, high = bucket_bounds(i)
                return float(min(max((low + high - 1) / 2, self.min_ns), self.max_ns))
        return float(self.max_ns)

    def cdf(self) -> list[tuple[float, float]]:
        """(latency ns at a bucket's top, share of requests at or below it), one point per non-empty bucket:
        what ``report`` draws."""
        out, seen = [], 0
        for i in sorted(self.counts):
            seen += self.counts[i]
            out.append((float(min(bucket_bounds(i)[1] - 1, self.max_ns)), seen / self.count))
        return out


Histograms = dict[str, Histogram]  # by operation kind


def merged(parts: list[Histograms]) -> Histograms:
    """Several processes' (or operations') histograms as one per kind."""
    out: Histograms = {}
    for part in parts:
        for kind, h in part.items():
            out.setdefault(kind, Histogram()).add(h)
    return out


class _Dense:
    """The recording form of one kind: a list indexed by bucket (a list index is the cheapest increment
    Python has), turned into a :class:`Histogram` when taken."""

    __slots__ = ("count", "counts", "max_ns", "min_ns", "nbytes", "total_ns")

    def __init__(self) -> None:
        self.counts = [0] * BUCKETS
        self.count = self.total_ns = self.max_ns = self.nbytes = 0
        self.min_ns = -1

    def histogram(self) -> Histogram:
        """Only the buckets between the least and the greatest value's can be non-empty: those are scanned."""
        low, counts = max(self.min_ns, 0), self.counts
        nonempty = {i: counts[i] for i in range(bucket_of(low), bucket_of(self.max_ns) + 1) if counts[i]}
        return Histogram(nonempty, self.count, self.total_ns, low, self.max_ns, self.nbytes)


class LatencyRecorder:
    """Latencies of this process's calls to one storage, by kind, since the last :meth:`take`; threads
    record concurrently. ``record`` is the hot path: a bucket, an increment, three compares, under a lock."""

    def __init__(self) -> None:
        self._kinds: dict[str, _Dense] = {}
        self._lock = threading.Lock()

    def record(self, kind: str, ns: int, nbytes: int = 0) -> None:
        if ns < SUB:
            i = ns if ns > 0 else 0
        else:
            e = ns.bit_length() - SUB_BITS - 1
            i = ((e + 1) << SUB_BITS) + (ns >> e) - SUB
            if i >= BUCKETS:
                i = BUCKETS - 1
        with self._lock:
            d = self._kinds.get(kind)
            if d is None:
                d = self._kinds[kind] = _Dense()
            d.counts[i] += 1
            d.count += 1
            d.total_ns += ns
            d.nbytes += nbytes
            if ns > d.max_ns:
                d.max_ns = ns
            if d.min_ns < 0 or ns < d.min_ns:
                d.min_ns = ns

    def take(self) -> Histograms:
        """Everything recorded since the last call, by kind; recording starts afresh."""
        with self._lock:
            kinds, self._kinds = self._kinds, {}
        return {kind: d.histogram() for kind, d in kinds.items() if d.count}
