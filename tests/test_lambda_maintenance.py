"""The Lambda's maintenance run (`{"maintenance": true}`) through the real handler on the
embedded warehouse: it prunes per `[operations] retention_days` and vacuums the stages
keeping more deleted rows than `[operations] stage_vacuum_rows`, outside any CALL.

AWS, VACUUM (r_VACUUM_command, usage notes): "You cannot run VACUUM within a transaction
block (BEGIN ... END)" and "You can run only one VACUUM command on a cluster at any given
time. If you attempt to run multiple vacuum operations concurrently, Amazon Redshift returns
an error", which reads "VACUUM is running ... re-execute after other vacuum finished"
(dbt-labs/dbt-core#639). Vacuuming tables
(t_Reclaiming_storage_space202): deleted rows are "marked for deletion, but not removed",
and automatic VACUUM DELETE runs "during periods of reduced load".
"""

from __future__ import annotations

import json
import os

import pytest

from sync.aws import lambda_handler
from sync.aws.maintenance import VACUUM_BUSY, MaintenanceFailed
from sync.local.stream import ingest_file
from tests.helpers import EXAMPLES
from tests.test_lambda_handler import EVENTS, Context, api, env  # noqa: F401 (fixtures)

REDSHIFT_VACUUM_BUSY = "ERROR: VACUUM is running HINT: re-execute after other vacuum finished"


@pytest.fixture
def synced(deployed, api, env, tmp_path):  # noqa: F811
    """Customer records synced by a normal invocation (the stage keeps them as deleted
    rows), a run-log row 40 days old, and a pipeline file vacuuming past 1 deleted row."""
    wh, pipeline = deployed
    config = tmp_path / "pipeline.toml"
    config.write_text((EXAMPLES / "salesdb" / "pipeline.toml").read_text() + "\n[operations]\nstage_vacuum_rows = 1\n")
    env.setenv("REDSHIFT_SYNC_CONFIG", str(config))
    ingest_file(wh, pipeline, "customer", EVENTS / "customer-1.jsonl")
    assert lambda_handler.handler({}, Context())["ok"]
    # Older than the newest row of the table (which prune keeps), and than the retention.
    wh.execute(
        "INSERT INTO cdc.sync_run_log (run_id, table_name, started_at, status)"
        " VALUES (0, 'customer', now() - INTERVAL '40 days', 'ok')"
    )
    return wh


def stage_stats(wh) -> dict[str, tuple[int, int]]:
    rows = wh.query("SELECT relname, n_dead_tup, vacuum_count FROM pg_stat_user_tables WHERE relname LIKE '%%\\_\\_stage'")
    return {name: (dead, vacuums) for name, dead, vacuums in rows}


def old_run_log_rows(wh) -> int:
    return wh.query("SELECT COUNT(*) FROM cdc.sync_run_log WHERE started_at < now() - INTERVAL '30 days'")[0][0]


def test_a_maintenance_invocation_prunes_and_vacuums_a_stage_past_the_threshold(synced, api, capsys):  # noqa: F811
    wh = synced
    before = stage_stats(wh)
    assert before["customer__stage"][0] > 1 and old_run_log_rows(wh) == 1
    capsys.readouterr()
    earlier = len(api.statements())

    summary = lambda_handler.handler({"maintenance": True}, Context())

    m = summary["maintenance"]
    assert summary["ok"] and m["pruned_rows"] >= 1 and old_run_log_rows(wh) == 0
    assert [(v["table"], v["outcome"]) for v in m["vacuums"]] == [("customer", "vacuumed")]
    assert stage_stats(wh)["customer__stage"][1] == before["customer__stage"][1] + 1
    assert "orders" not in {v["table"] for v in m["vacuums"]}  # nothing synced, nothing deleted
    # Outside any transaction: the vacuum was its own statement, the prune one batch per transaction.
    ran = [s["QueryString"] for s in api.statements()[earlier:]]
    assert [q for q in ran if q.startswith("VACUUM")] == ['VACUUM "cdc"."customer__stage"']
    assert not any(q.startswith("CALL") for q in ran)  # a maintenance run syncs nothing
    # One BatchExecuteStatement per prune transaction, its lock first: the run log's, then each table's.
    assert [q.split("\n")[0] for q in ran if q.startswith("LOCK")] == [
        'LOCK TABLE "cdc"."sync_run_log" IN SHARE ROW EXCLUSIVE MODE;',
        'LOCK TABLE "cdc"."customer__watermark" IN SHARE ROW EXCLUSIVE MODE;',
        'LOCK TABLE "cdc"."orders__watermark" IN SHARE ROW EXCLUSIVE MODE;',
    ]
    metrics, run = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (metrics["PrunedRows"], metrics["StagesVacuumed"], metrics["VacuumsSkipped"]) == (m["pruned_rows"], 1, 0)
    assert {x["Name"] for x in metrics["_aws"]["CloudWatchMetrics"][0]["Metrics"]} >= {"PrunedRows", "StagesVacuumed"}
    assert run["run"]["maintenance"]["stages_vacuumed"] == 1


def test_another_vacuum_running_is_a_skip_not_a_failure(synced, api):  # noqa: F811
    api.inject_failure("VACUUM", REDSHIFT_VACUUM_BUSY)
    summary = lambda_handler.handler({"maintenance": True}, Context())
    assert summary["ok"]
    (vacuum,) = summary["maintenance"]["vacuums"]
    assert (vacuum["outcome"], vacuum["error"]) == ("skipped", REDSHIFT_VACUUM_BUSY)


def test_a_vacuum_outliving_the_deadline_is_a_skip(synced, api):  # noqa: F811
    api.inject_delay("VACUUM", 60)
    summary = lambda_handler.handler({"maintenance": True}, Context(6.0))  # 2 s of deadline margin
    assert summary["ok"]
    (vacuum,) = summary["maintenance"]["vacuums"]
    assert vacuum["outcome"] == "skipped" and "was not finished" in vacuum["error"]


def test_any_other_vacuum_error_fails_the_invocation(synced, api):  # noqa: F811
    api.inject_failure("VACUUM", "ERROR: permission denied for relation customer__stage")
    with pytest.raises(MaintenanceFailed, match="customer: ERROR: permission denied") as failed:
        lambda_handler.handler({"maintenance": True}, Context())
    assert failed.value.summary["maintenance"]["vacuums"][0]["outcome"] == "failed"


def test_a_normal_invocation_does_no_maintenance(synced, api):  # noqa: F811
    wh = synced
    before = stage_stats(wh)["customer__stage"][1]
    summary = lambda_handler.handler({}, Context())
    assert "maintenance" not in summary and old_run_log_rows(wh) == 1
    assert stage_stats(wh)["customer__stage"][1] == before
    assert not any(s["QueryString"].startswith("VACUUM") for s in api.statements())


def test_connector_mode_prunes_and_vacuums_on_its_autocommit_connection(synced, env, database_dsn):  # noqa: F811
    wh = synced
    env.delenv("REDSHIFT_SYNC_WORKGROUP")
    env.setenv("REDSHIFT_SYNC_DSN", database_dsn)
    before = stage_stats(wh)["customer__stage"][1]
    summary = lambda_handler.handler({"maintenance": True}, Context())
    assert summary["mode"] == "redshift_connector" and summary["ok"] and old_run_log_rows(wh) == 0
    assert stage_stats(wh)["customer__stage"][1] == before + 1


@pytest.mark.parametrize(
    "error, busy",
    [
        (REDSHIFT_VACUUM_BUSY, True),
        ("ERROR: Another vacuum is running.", True),
        ("ERROR: VACUUM cannot run inside a transaction block", False),
        ("ERROR: 1023 DETAIL: Serializable isolation violation on table", False),
    ],
)
def test_only_a_running_vacuum_counts_as_busy(error, busy):
    assert bool(VACUUM_BUSY.search(error)) is busy


def test_a_maintenance_flag_that_is_not_a_boolean_is_refused():
    with pytest.raises(lambda_handler.ConfigError, match='"maintenance" must be true or false'):
        lambda_handler.is_maintenance({"maintenance": "yes"})


def test_a_local_batch_is_one_transaction(synced, api):  # noqa: F811
    # BatchExecuteStatement: "The SQL statements are run as a single transaction."
    wh = synced
    insert = "INSERT INTO cdc.sync_run_log (table_name, started_at, status) VALUES ('customer', now(), 'ok')"
    done = api.batch_execute_statement(WorkgroupName="local", Database="dev", Sqls=[insert, insert])
    assert api.wait(done["Id"]) == "FINISHED"
    assert [s["ResultRows"] for s in api.describe_statement(Id=done["Id"])["SubStatements"]] == [1, 1]
    count = wh.query("SELECT COUNT(*) FROM cdc.sync_run_log")[0][0]
    failed = api.batch_execute_statement(WorkgroupName="local", Database="dev", Sqls=[insert, "SELECT 1 / 0"])
    assert api.wait(failed["Id"]) == "FAILED" and "division by zero" in api.describe_statement(Id=failed["Id"])["Error"]
    assert wh.query("SELECT COUNT(*) FROM cdc.sync_run_log")[0][0] == count  # the first statement rolled back


def test_a_user_who_may_not_read_the_statistics_is_told_what_to_grant(synced, env, database_dsn):  # noqa: F811
    """ "SVV_TABLE_INFO is visible only to superusers ... To permit a user to query the view,
    grant SELECT permission on SVV_TABLE_INFO to the user" (r_SVV_TABLE_INFO). A maintenance
    run by such a user still prunes, vacuums nothing and says what to grant, without failing
    the invocation; `doctor` fails its check with the same words. PostgreSQL's statistics
    view, revoked from PUBLIC in the test's database, stands for it."""
    from sync.config import load_pipeline
    from sync.operations.doctor import CheckState, stage_statistics_check
    from sync.warehouse import connect

    wh = synced
    user = f"sync_user_{os.getpid()}"
    dsn = database_dsn.replace("postgresql://postgres:", f"postgresql://{user}:", 1)
    assert dsn != database_dsn
    wh.execute(f'CREATE ROLE "{user}" LOGIN')
    try:
        wh.execute(f'GRANT USAGE ON SCHEMA cdc TO "{user}"')
        wh.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA cdc TO "{user}"')
        wh.execute("REVOKE SELECT ON pg_catalog.pg_stat_user_tables FROM PUBLIC")
        env.delenv("REDSHIFT_SYNC_WORKGROUP")
        env.setenv("REDSHIFT_SYNC_DSN", dsn)
        grant = f'GRANT SELECT ON pg_stat_user_tables TO "{user}"'

        summary = lambda_handler.handler({"maintenance": True}, Context())

        m = summary["maintenance"]
        assert summary["ok"] and m["check_error"] is None and grant in m["check_denied"], m
        assert m["vacuums"] == [] and m["pruned_rows"] >= 1
        pipeline, _ = load_pipeline()
        as_user = connect(dsn)
        check = stage_statistics_check(as_user, pipeline)
        assert check.state == CheckState.FAILED and grant in check.detail

        wh.execute(f'GRANT SELECT ON pg_catalog.pg_stat_user_tables TO "{user}"')
        assert stage_statistics_check(as_user, pipeline).state == CheckState.OK
        as_user.close()
        m = lambda_handler.handler({"maintenance": True}, Context())["maintenance"]
        assert m["check_denied"] is None and m["stages_checked"] == 2
    finally:
        wh.execute(f'DROP OWNED BY "{user}"')
        wh.execute(f'DROP ROLE "{user}"')
