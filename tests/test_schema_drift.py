"""Schema drift counted over a batch equals a plain-Python count over all its row images,
whatever mix of images matches the configured fields exactly (those the stage query does
not set aside), lacks some, carries nulls, or carries extra fields."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sync.debezium.events import ChangeStream, MySqlSource
from tests.helpers import feed
from tests.test_debezium_envelopes import shapes

CONFIGURED = ("id", "name", "bio")  # the columns of the example's `my` table
EXTRAS = ("Added", "other", "__meta")  # __ fields are unwrap metadata, never drift

# A field is absent, JSON null, or holds a value.
field_state = st.sampled_from(["absent", "null", "value"])
image = st.tuples(field_state, field_state, st.frozensets(st.sampled_from(EXTRAS)))


def expected_drift(images: list[dict]) -> set[tuple[str, str, int]]:
    unknown = Counter(k for img in images for k in img if k not in CONFIGURED and not k.startswith("__"))
    missing = {f: sum(f not in img for img in images) for f in CONFIGURED}
    return {("unknown", k, n) for k, n in unknown.items()} | {("missing", f, n) for f, n in missing.items() if n}


def test_drift_counts_equal_a_count_over_every_image(wh):
    pipeline = shapes(wh)
    stream = ChangeStream(["id"], MySqlSource(table="t"))
    ids = itertools.count(1)

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(image, min_size=1, max_size=10))
    def check(shapes_of_images):
        images = []
        for name_state, bio_state, extras in shapes_of_images:
            img = {"id": next(ids)}
            for field, state in (("name", name_state), ("bio", bio_state)):
                if state != "absent":
                    img[field] = None if state == "null" else f"{field}-{img['id']}"
            img.update({k: 1 for k in sorted(extras)})
            images.append(img)
        run = feed(wh, pipeline, "my", [stream.insert(img) for img in images])
        assert run.upserted == len(images)
        recorded = wh.query(
            "SELECT d.kind, d.field, d.events FROM cdc.sync_schema_drift d\n"
            "WHERE d.table_name = 'my' AND d.run_started_at = (\n"
            "  SELECT MAX(started_at) FROM cdc.sync_run_log WHERE table_name = 'my')"
        )
        assert set(recorded) == expected_drift(images), images

    check()
