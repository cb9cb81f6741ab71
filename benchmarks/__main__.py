"""`python -m benchmarks [--quick] [--out results.json] [--dsn postgresql://...]`

Starts a dedicated embedded PostgreSQL in a temporary directory (or uses `--dsn`, which
must name a scratch database: the run creates and empties the schemas `cdc` and `bench`),
runs every phase, prints a table and writes the JSON document.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from benchmarks import history, phases
from benchmarks.database import deployed
from benchmarks.ingest import ingest
from benchmarks.measure import Clock, machine, server_settings, versions
from benchmarks.report import expected_figures, table, target_results, write_json
from benchmarks.sizes import FULL, QUICK
from benchmarks.workload import PIPELINE, REPO, TABLE, relations

RESULTS = Path(__file__).resolve().parent / "results"
PHASES = ("incremental", "scaling", "empty-sync", "ingest", "history", "backfill")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run, well under two minutes)")
    parser.add_argument("--out", type=Path, help="JSON file to write (default for a full run: benchmarks/results/<date>.json)")
    parser.add_argument("--dsn", help="a scratch PostgreSQL database instead of a fresh embedded server")
    parser.add_argument(
        "--phase", action="append", choices=PHASES, dest="phases", help="run only this phase (repeatable; default: all)"
    )
    return parser.parse_args(argv)


def run(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc)
    progress = lambda msg: print(f"[{time.perf_counter() - started:7.1f}s] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    with deployed(args.dsn) as (wh, pipeline, engine):
        target = pipeline.table(TABLE)
        bench = phases.Bench(wh, pipeline, relations(pipeline, target), sizes, progress, Clock(wh))
        selected = args.phases or PHASES
        for name, phase in (
            ("incremental", phases.incremental),
            ("scaling", phases.scaling),
            ("empty-sync", phases.empty_sync),
            ("ingest", ingest),
            ("history", history.history),
        ):
            if name in selected:
                phase(bench)
        skip = phases.backfill_available() if "backfill" in selected else "not selected (--phase)"
        if skip:
            bench.skipped["backfill"] = skip
            progress(f"backfill and reconcile: {skip}")
        else:
            phases.backfill(bench)
        doc = {
            "command": " ".join(["python -m benchmarks", shlex.join(argv if argv is not None else sys.argv[1:])]).strip(),
            "started_at": started_at.isoformat(timespec="seconds"),
            "duration_seconds": round(time.perf_counter() - started, 1),
            "engine": f"{engine} {wh.scalar('SHOW server_version')}",
            "machine": machine(),
            "versions": versions(wh),
            "server_settings": server_settings(wh),
            "inputs": {
                **sizes.as_dict(),
                "quick": args.quick,
                "table": f"{pipeline.schema}.{target.name}",
                "pipeline": str(PIPELINE.relative_to(REPO)),
                "workload": "60% updates (keys changed several times), 25% inserts, 15% deletes; "
                "full Debezium envelope, MySQL binlog order, 4 Kafka partitions",
            },
            "figures": {k: round(v, 6) for k, v in bench.figures.items()},
            "measurements": bench.measurements,
            "targets": target_results(bench.figures),
            "breakdown": bench.breakdown,
            "notes": bench.notes,
            "skipped": bench.skipped,
            "phases": list(selected),
            "expected_figures": expected_figures(sizes, selected, "backfill" not in bench.skipped),
        }
    out = args.out or (None if args.quick else RESULTS / f"{started_at:%Y-%m-%d}.json")
    print(table(doc))
    if out:
        write_json(doc, out)
        print(f"\nJSON written to {out}")
    return doc


if __name__ == "__main__":
    run()
