"""Names of the objects the generator creates for a pipeline and its tables."""

from __future__ import annotations

from dataclasses import dataclass

from sync.config import Pipeline, TableConfig

RUN_LOG = "sync_run_log"
# The session's temporary table in which a sync call leaves its run-log row for its
# caller, who reads it in the call's own transaction (sync/sql/procedure/call_result.py).
CALL_RESULT = "sync_call_result"
# Views over every table's quarantine and schema-drift tables (TableNames.quarantine,
# .schema_drift): what users, `status` and the Lambda read. Each procedure writes and
# reads only its own table's, so two tables' CALLs share no table they both read and
# write (docs/redshift.md, "Concurrency and isolation").
QUARANTINE = "sync_quarantine"
SCHEMA_DRIFT = "sync_schema_drift"
# The heartbeat topic's stream relation ([heartbeat]); no table name has "__".
HEARTBEAT_STREAM = "sync_heartbeat__stream"
# PostgreSQL only: the refreshes `ingest` made, shaped like Redshift's SYS_MV_REFRESH_HISTORY.
REFRESH_HISTORY = "sync_mv_refresh_history"


@dataclass(frozen=True)
class TableNames:
    """The per-table objects, all in the pipeline schema."""

    schema: str
    table: str
    # The table whose name the topic's streaming view takes: the first of the tables that
    # share the topic (`Pipeline.sharing`), else the table itself.
    stream_owner: str | None = None
    history_table: str | None = None  # the history's own name, when the pipeline file sets one

    @property
    def target(self) -> str:
        return self.table

    @property
    def stream(self) -> str:
        """The streaming MV on Redshift; a local table filled by `ingest` on PostgreSQL.
        One per topic: AWS's streaming ingestion reads the whole topic into each view."""
        return f"{self.stream_owner or self.table}__stream"

    @property
    def stage(self) -> str:
        return f"{self.table}__stage"

    @property
    def watermark(self) -> str:
        return f"{self.table}__watermark"

    @property
    def deleted_keys(self) -> str:
        return f"{self.table}__deleted"

    @property
    def history(self) -> str:
        """Every version of every row (history = true)."""
        return self.history_table or f"{self.table}__history"

    @property
    def quarantine(self) -> str:
        return f"{self.table}__quarantine"

    @property
    def schema_drift(self) -> str:
        return f"{self.table}__drift"

    @property
    def procedure(self) -> str:
        return f"incremental_sync_{self.table}"

    @property
    def isolate_procedure(self) -> str:
        return f"isolate_record_{self.table}"


def table_names(pipeline: Pipeline, table: TableConfig) -> TableNames:
    return TableNames(pipeline.schema, table.name, stream_owner(pipeline, table), table.history.table if table.history else None)


def stream_owner(pipeline: Pipeline, table: TableConfig) -> str:
    """The table whose name the streaming view of `table`'s topic takes (`Pipeline.sharing`)."""
    sharing = pipeline.sharing(table)
    return sharing[0].name if table in sharing else table.name
