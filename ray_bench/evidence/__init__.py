"""Evidence: the error catalog, the classification of attempts, valid rows."""

from ray_bench.evidence.catalog import FAILURE_CLASSES, Catalog, CatalogRule
from ray_bench.evidence.classify import COUNTING_CLASSES, Verdict, classify, fingerprint

__all__ = ["COUNTING_CLASSES", "FAILURE_CLASSES", "Catalog", "CatalogRule", "Verdict", "classify", "fingerprint"]
