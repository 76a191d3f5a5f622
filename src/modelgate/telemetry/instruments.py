"""Counters and histograms for the request path, as cheap as a dictionary update.

``prometheus_client``'s own instruments take a lock per update (a counter child ~0.3 µs, a
histogram observation ~0.7 µs, measured); the request path records a handful of them per request,
all from the event loop's one thread. These keep plain numbers instead and hand them to
``prometheus_client`` as metric families when Prometheus scrapes (its documented custom-collector
interface), so the exposition format, the registry and the process collectors stay the library's.

Only the event loop's thread may update them, except where a caller says otherwise and locks.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

Labels = tuple[str, ...]


class CounterVec:
    __slots__ = ("documentation", "labels", "name", "values")

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = tuple(labels)
        self.values: dict[Labels, float] = {}

    def inc(self, labels: Labels, amount: float = 1) -> None:
        values = self.values
        values[labels] = values.get(labels, 0) + amount

    def family(self) -> CounterMetricFamily:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
        for labels, value in list(self.values.items()):
            family.add_metric(list(labels), value)
        return family


class Histogram:
    """One series: a count per bucket (the last one beyond every bound) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # Prometheus buckets are "less than or equal": bisect_left finds the first bound >= value.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class HistogramVec:
    __slots__ = ("bounds", "children", "documentation", "labels", "name")

    def __init__(self, name: str, documentation: str, labels: Sequence[str], bounds: Iterable[float]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = tuple(labels)
        self.bounds = tuple(sorted(float(b) for b in bounds))
        self.children: dict[Labels, Histogram] = {}

    def child(self, labels: Labels = ()) -> Histogram:
        child = self.children.get(labels)
        if child is None:
            child = self.children[labels] = Histogram(self.bounds)
        return child

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        edges = [repr(b) for b in self.bounds] + ["+Inf"]  # "0.005", "1.0": as prometheus_client writes them
        for labels, child in list(self.children.items()):
            cumulative, buckets = 0, []
            for edge, count in zip(edges, list(child.counts), strict=True):
                cumulative += count
                buckets.append((edge, cumulative))
            family.add_metric(list(labels), buckets, child.sum)
        return family


class Instruments(Collector):
    """The instruments of one registry, exposed at each scrape."""

    def __init__(self) -> None:
        self._all: list[CounterVec | HistogramVec] = []

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> CounterVec:
        vec = CounterVec(name, documentation, labels)
        self._all.append(vec)
        return vec

    def histogram(
        self, name: str, documentation: str, labels: Sequence[str], bounds: Iterable[float]
    ) -> HistogramVec:
        vec = HistogramVec(name, documentation, labels, bounds)
        self._all.append(vec)
        return vec

    def collect(self) -> Iterable[Metric]:
        return [vec.family() for vec in self._all]

    def describe(self) -> Iterable[Metric]:
        return ()
