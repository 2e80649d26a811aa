"""Ledgers as older versions of ray-bench left them, made from a current one."""

from __future__ import annotations

#: A ledger from before the ``cells`` table (issue 57): no table, no triggers keeping it.
OLDER_THAN_CELLS = "DROP TRIGGER cells_started; DROP TRIGGER cells_ended; DROP TABLE cells;"
