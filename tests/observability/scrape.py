"""Reading a gateway's ``/metrics``: parsed families, and sums over their samples."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


class Scrape:
    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}

    def samples(self, name: str) -> list[Sample]:
        """Samples named ``name`` exactly (``x_total``, ``x_count``, ``x_bucket``, a gauge's name)."""
        return [s for f in self.families.values() for s in f.samples if s.name == name]

    def value(self, name: str, **labels: str) -> float:
        """The sum of ``name``'s samples whose labels include ``labels``."""
        return sum(s.value for s in self.samples(name) if _matches(s.labels, labels))

    def by(self, name: str, label: str, **labels: str) -> dict[str, float]:
        """``name`` summed per value of ``label`` (zero sums left out)."""
        out: dict[str, float] = {}
        for sample in self.samples(name):
            if _matches(sample.labels, labels):
                out[sample.labels[label]] = out.get(sample.labels[label], 0.0) + sample.value
        return {k: v for k, v in out.items() if v}


def _matches(have: Mapping[str, str], want: Mapping[str, str]) -> bool:
    return all(have.get(k) == v for k, v in want.items())


def scrape(base_url: str, token: str | None = None) -> Scrape:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return Scrape(response.text)
