"""`incremental_sync_<table>()`: the procedure that merges a topic's new records into its
target table. One text for both dialects; the dialect supplies JSON access, casts and a
handful of spellings. The numbered comments follow the procedure contract (README, "How a
sync works").

The procedure is a list of named steps (`steps.SYNC_STEPS`, and `steps.APPLY_STEPS` over a
batch that has records), each a function of the table's `TableSql` returning the SQL of
one step. The modules follow the concerns: the stage query (`batch`, `fields`,
`classify`, `stage`), the ordering rules (`ordering`), TOAST (`toast`), truncates
(`truncate`), the apply (`apply`), schema drift (`drift`), the bookkeeping around them
(`bookkeeping`: lock, watermark, counts, quarantine, run log), the steps and their stage
contract (`steps`) and the procedures' text (`assembly`)."""

from sync.sql.procedure.assembly import isolate_record_sql, procedure_sql, scheduled_procedure_sql
from sync.sql.procedure.batch import pending_condition
from sync.sql.procedure.context import WATERMARK_ITEM, Action, TableSql
from sync.sql.procedure.drift import schema_drift_sql
from sync.sql.procedure.fields import raw_field_sql, read_as_text, toastable, unavailable_sql
from sync.sql.procedure.ordering import rank_order
from sync.sql.procedure.stage import stage_insert_sql
from sync.sql.procedure.steps import APPLY_STEPS, SYNC_STEPS, Step, apply_batch_sql
from sync.sql.procedure.toast import toast_sql

__all__ = [
    "APPLY_STEPS",
    "SYNC_STEPS",
    "WATERMARK_ITEM",
    "Action",
    "Step",
    "TableSql",
    "apply_batch_sql",
    "isolate_record_sql",
    "pending_condition",
    "procedure_sql",
    "rank_order",
    "raw_field_sql",
    "read_as_text",
    "scheduled_procedure_sql",
    "schema_drift_sql",
    "stage_insert_sql",
    "toast_sql",
    "toastable",
    "unavailable_sql",
]
