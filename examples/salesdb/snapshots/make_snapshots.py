"""Writes the sample snapshot of the salesdb example (run from the repository root):

    python examples/salesdb/snapshots/make_snapshots.py

customer-20231114T221321Z.jsonl: an export of the source CUSTOMER table taken at
2023-11-14 22:13:21.500 UTC, between the stream's first events (see ../make_events.py):
after C006 was created, before C002 was updated and C003, C004, C006 were deleted. It also
holds two archived customers (C201, C202) that the stream never carried. Backfilling it
after the stream must load C001 (older in the stream), C201 and C202, and keep every
change the stream made later.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
SNAPSHOT_TIME = "2023-11-14T22:13:21.500Z"

CUSTOMERS = [
    ("C001", "Acme Corp", "BUILDING"),
    ("C002", "Globex", "AUTOMOBILE"),
    ("C003", "Initech", "MACHINERY"),
    ("C004", "Umbrella", "HOUSEHOLD"),
    ("C005", "Hooli", "FURNITURE"),
    ("C006", "Stark Industries", "MACHINERY"),
    ("C201", "Wayne Enterprises", "MACHINERY"),
    ("C202", "Soylent", "HOUSEHOLD"),
]


def main() -> None:
    path = HERE / "customer-20231114T221321Z.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for key, name, segment in CUSTOMERS:
            fh.write(json.dumps({"CUST_ID": key, "NAME": name, "MKTSEGMENT": segment}) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
