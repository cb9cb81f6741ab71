"""The procedures' text (sync/sql/procedure/assembly.py), pinned for a one-column and a
composite-key table."""

from __future__ import annotations

from sync.sql.procedure.assembly import isolate_record_sql, procedure_sql, scheduled_procedure_sql
from tests.helpers import COMPOSITE_KEY, ONE_COLUMN, assert_lines, table_sql

ONE, COMPOSITE = table_sql(ONE_COLUMN), table_sql(COMPOSITE_KEY)


def _text(render, ctx) -> str:
    return render(ctx.d, ctx.pipeline, ctx.table, "pipeline.toml")


def test_the_sync_procedure_pins_utc_and_declares_what_its_steps_use():
    sql = _text(procedure_sql, ONE)
    assert sql.startswith('CREATE OR REPLACE PROCEDURE "cdc"."incremental_sync_tag"(p_max_records bigint)\nAS $$\n')
    assert sql.endswith("END;\n$$ LANGUAGE plpgsql\nSET timezone TO 'UTC';")
    declared = sql.split("DECLARE\n", 1)[1].split("\nBEGIN\n", 1)[0]
    assert {"v_started timestamp;", "v_positionless bigint := 0;"} <= {d.strip() + ";" for d in declared.split(";")}
    assert_lines(sql, "IF v_read > 0 THEN")
    assert "v_unavailable" in _text(procedure_sql, COMPOSITE)


def test_the_scheduled_procedure_calls_the_bounded_one_unbounded():
    assert_lines(_text(scheduled_procedure_sql, COMPOSITE), 'CALL "cdc"."incremental_sync_line"(CAST(NULL AS bigint));')


def test_record_isolation_quarantines_the_first_pending_record_and_moves_past_it():
    assert_lines(
        _text(isolate_record_sql, ONE),
        'LOCK TABLE "cdc"."tag__watermark";',
        "WHERE x.read_no = 1;",
        "IF v_partition IS NOT NULL THEN",
        'UPDATE "cdc"."tag__watermark" SET last_offset = v_offset, last_refresh_time = v_refresh_time, updated_at = v_started',
    )
