"""Writes the sample events of the salesdb example (run from the repository root):

    python examples/salesdb/make_events.py

Batches, as three refreshes of each topic would deliver them:
  customer-1: the initial snapshot (op r) of five customers
  customer-2: inserts, updates, a delete, a re-insert of the deleted key, a primary-key
              change (d + tombstone + c), a value that is not JSON, an event without its key
  customer-3: a connector restart re-delivering events already applied, plus new ones
  orders-1:   orders with decimal totals and timestamps, one update, one soft delete
"""

from __future__ import annotations

from pathlib import Path

from sync.debezium.events import ChangeStream, MySqlSource, write_jsonl

HERE = Path(__file__).parent / "events"


def customers() -> dict[str, list[dict]]:
    cs = ChangeStream(["CUST_ID"], MySqlSource(table="CUSTOMER"))
    rows = {
        f"C{i:03d}": {"CUST_ID": f"C{i:03d}", "NAME": name, "MKTSEGMENT": seg}
        for i, (name, seg) in enumerate(
            [
                ("Acme Corp", "BUILDING"),
                ("Globex", "AUTOMOBILE"),
                ("Initech", "MACHINERY"),
                ("Umbrella", "HOUSEHOLD"),
                ("Hooli", "FURNITURE"),
            ],
            start=1,
        )
    }
    batch1 = [cs.snapshot(r) for r in rows.values()]

    c6 = {"CUST_ID": "C006", "NAME": "Stark Industries", "MKTSEGMENT": "MACHINERY"}
    c2b = {**rows["C002"], "MKTSEGMENT": "MACHINERY"}
    c2c = {**c2b, "NAME": "Globex Corporation"}
    c4_new = {**rows["C004"], "CUST_ID": "C104"}
    batch2 = [
        cs.insert(c6),
        cs.update(rows["C002"], c2b),
        cs.update(c2b, c2c),
        cs.delete(rows["C003"]),
        cs.tombstone(rows["C003"]),
        cs.insert({**rows["C003"], "NAME": "Initech (re-opened)"}),
        # primary-key change C004 -> C104: delete old key, tombstone, create new key
        cs.delete(rows["C004"]),
        cs.tombstone(rows["C004"]),
        cs.insert(c4_new),
        {"partition": 0, "key": None, "value": "this is not JSON {"},
        cs._record({"CUST_ID": None}, cs._event("c", None, {"NAME": "no key", "MKTSEGMENT": "X"})),
    ]
    replay = batch2[1:3]  # a restarted connector re-emits two updates already applied
    c5b = {**rows["C005"], "MKTSEGMENT": "BUILDING"}
    batch3 = [*replay, cs.update(rows["C005"], c5b), cs.delete(c6), cs.tombstone(c6)]
    return {"customer-1.jsonl": batch1, "customer-2.jsonl": batch2, "customer-3.jsonl": batch3}


def orders() -> dict[str, list[dict]]:
    os_ = ChangeStream(["ORDER_ID"], MySqlSource(table="ORDERS", pos=1000))
    rows = [
        {
            "ORDER_ID": 1000 + i,
            "CUST_ID": f"C{(i % 5) + 1:03d}",
            "STATUS": "PLACED",
            "TOTAL": f"{(i * 37.5 + 12.25):.2f}",
            "PLACED_AT": f"2024-03-0{1 + i % 9}T10:{i:02d}:00",
        }
        for i in range(8)
    ]
    batch = [os_.insert(r) for r in rows]
    shipped = {**rows[0], "STATUS": "SHIPPED"}
    batch += [os_.update(rows[0], shipped), os_.delete(rows[7]), os_.tombstone(rows[7])]
    return {"orders-1.jsonl": batch}


def main() -> None:
    HERE.mkdir(exist_ok=True)
    for name, records in {**customers(), **orders()}.items():
        write_jsonl(records, HERE / name)
        print(f"wrote {HERE / name} ({len(records)} records)")


if __name__ == "__main__":
    main()
