"""Who scrapes a run's metrics: what tells a Prometheus scrape from any other GET, and who made it.

Prometheus sets ``X-Prometheus-Scrape-Timeout-Seconds`` on every scrape request
(prometheus/prometheus ``scrape/scrape.go``, ``targetScraper.scrape``), and so do vmagent and
the agents built on Prometheus's scrape code (Grafana Agent/Alloy, the OpenTelemetry
collector's prometheus receiver). An operator's ``curl`` or a test's GET does not carry it:
it must not count as the scrape that lets a linger end.

A scraper is told by the address it connects from: the two replicas of a Prometheus HA pair
scrape from two hosts, and each must store a run's final figures.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The request header every Prometheus scrape carries, as a WSGI environ key and as sent.
SCRAPE_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
SCRAPE_ENVIRON = "HTTP_" + SCRAPE_HEADER.upper().replace("-", "_")


def joined(scrapers: Iterable[str]) -> str:
    """Scraper addresses as one command-line value (an IPv6 address has colons, never commas)."""
    return ",".join(sorted(scrapers))


def split(text: str) -> frozenset[str]:
    return frozenset(s for s in text.split(",") if s)
