"""The state a schema revision brings the warehouse to.

A revision does not pin SQL text. It records the pipeline model it applies (every field,
defaults included, so a later change of a default cannot change an old revision's
meaning), the origin the generated comments name, and a fingerprint of every object the
generator rendered from that model, in both dialects. SQL is rendered from the state by
the generator when the revision runs.

The fingerprints are how generator changes stay visible: `redshift-sync revision` renders
the last revision's state again with the generator installed now and compares. Any
difference becomes an explicit, reviewable revision (replace the procedure, re-create the
stream) instead of silently changing what an old revision does to a warehouse that
already ran it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sync.config import OPERATIONAL_SECTIONS, Pipeline, parse_pipeline
from sync.sql.dialect import DIALECTS
from sync.sql.objects import SqlObject, pipeline_objects

State = dict[str, Any]


def object_label(obj: SqlObject) -> str:
    return f"{obj.kind} {obj.schema}.{obj.name}" + (f"({obj.arguments})" if obj.arguments else "")


def object_digest(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()[:16]


def fingerprints(pipeline: Pipeline, origin: str) -> dict[str, dict[str, str]]:
    """dialect -> object label -> short SHA-256 of the object's SQL."""
    return {
        dialect: {object_label(o): object_digest(o.sql) for o in pipeline_objects(pipeline, dialect, origin)}
        for dialect in DIALECTS
    }


def warehouse_model(pipeline: Pipeline) -> dict[str, Any]:
    """The pipeline as revisions record it: everything but the operational settings
    (revisions folder, retention), which change how the tool runs, not the warehouse."""
    # A pipeline without [heartbeat], a table without a route and one without
    # replica_identity are recorded as before the section (the key) existed.
    exclude: dict[str, Any] = dict.fromkeys(OPERATIONAL_SECTIONS | ({"heartbeat"} if pipeline.heartbeat is None else set()), True)
    absent: dict[int, dict[str, bool]] = {}
    for i, t in enumerate(pipeline.tables):
        keys = ({"route"} if t.route is None else set()) | ({"replica_identity"} if t.replica_identity == "default" else set())
        if keys:
            absent[i] = dict.fromkeys(keys, True)
    if absent:
        exclude["tables"] = absent
    model = pipeline.model_dump(mode="json", by_alias=True, exclude=exclude)
    # ... and a table without history as before history existed.
    model["tables"] = [{k: v for k, v in t.items() if not (k == "history" and v is None)} for t in model["tables"]]
    return model


def state_for(pipeline: Pipeline, origin: str) -> State:
    return {
        "origin": origin,
        "pipeline": warehouse_model(pipeline),
        "fingerprints": fingerprints(pipeline, origin),
    }


def pipeline_of(state: State) -> Pipeline:
    return parse_pipeline(state["pipeline"], f"the state recorded for {state['origin']}")


def same_model(state: State, pipeline: Pipeline) -> bool:
    """True when the pipeline file describes exactly the recorded model."""
    return state["pipeline"] == warehouse_model(pipeline)


@dataclass(frozen=True)
class Drift:
    """An object the current generator renders differently for a recorded state."""

    dialect: str
    label: str
    kind: str
    table: str | None  # None for shared objects and for objects no longer generated
    generated: bool  # False: the generator no longer renders this object at all


def drifted_objects(state: State) -> list[Drift]:
    pipeline, origin = pipeline_of(state), state["origin"]
    out: list[Drift] = []
    for dialect in DIALECTS:
        recorded = state["fingerprints"].get(dialect, {})
        current = {object_label(o): o for o in pipeline_objects(pipeline, dialect, origin)}
        for label in sorted(recorded.keys() | current.keys()):
            obj = current.get(label)
            digest = object_digest(obj.sql) if obj else None
            if recorded.get(label) != digest:
                kind = obj.kind if obj else label.split(" ", 1)[0]
                out.append(Drift(dialect, label, kind, obj.table if obj else None, obj is not None))
    return out
