"""Redshift semantics the PostgreSQL suites cannot show, pinned as rules over the parsed
(sqlglot) Redshift rendering of every example pipeline, procedure bodies included. Each
rule is a row of docs/redshift.md and quotes the page of the AWS Database Developer Guide
(docs.aws.amazon.com/redshift/latest/dg/<page>) it rests on."""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from sync.config import Pipeline, parse_pipeline
from sync.sql.backfill_merge import BackfillSql
from sync.sql.dialect import RedshiftDialect, dialect_for
from sync.sql.names import table_names
from sync.sql.objects import auto_refresh_requirements
from sync.sql.render import render_files
from sync.sql.statements import body_sql_statements, procedure_body, split_statements
from tests.helpers import EXAMPLES, REPO

EXAMPLE_PIPELINES = sorted(EXAMPLES.glob("*/pipeline.toml"))
# sqlglot has no grammar for these (opaque commands); they are checked as text.
OPAQUE = ("CREATE EXTERNAL SCHEMA", "CALL ", "LOCK TABLE")
TEXT_TYPES = {
    exp.DataType.Type.VARCHAR,
    exp.DataType.Type.CHAR,
    exp.DataType.Type.TEXT,
    exp.DataType.Type.NVARCHAR,
    exp.DataType.Type.NCHAR,
    exp.DataType.Type.SUPER,
    exp.DataType.Type.VARBINARY,
}
# Functions that produce text from text: their result is what a cast must not parse unguarded.
TEXT_FUNCTIONS = (
    exp.Substring,
    exp.Pad,
    exp.DPipe,
    exp.Concat,
    exp.Trim,
    exp.RegexpExtract,
    exp.Upper,
    exp.Lower,
    exp.SplitPart,
    exp.Left,
    exp.Right,
)
TEXT_FUNCTION_NAMES = {
    "REPLACE",
    "SPLIT_PART",
    "LPAD",
    "RPAD",
    "BTRIM",
    "LTRIM",
    "RTRIM",
    "REGEXP_SUBSTR",
    "JSON_SERIALIZE",
    "TRANSLATE",
    "TIMEOFDAY",
}


@dataclass(frozen=True)
class Statement:
    example: str
    sql: str
    tree: exp.Expression
    in_procedure: bool


def _example(path: Path) -> Pipeline:
    return parse_pipeline(tomllib.loads(path.read_text()))


def procedure_statements(body: str) -> list[str]:
    """The SQL statements of a procedure body, SELECT ... INTO v_ included (without INTO)."""
    return body_sql_statements(re.sub(r"\n\s*INTO v_[a-z_, ]+\n", "\n", body))


@functools.cache
def rendering(path: Path) -> tuple[Statement, ...]:
    out = []
    for text in render_files(_example(path), "redshift", str(path.relative_to(REPO))).values():
        for sql in split_statements(text):
            if sql.startswith(OPAQUE):
                continue
            out.append(Statement(path.parent.name, sql, sqlglot.parse_one(sql, read="redshift"), False))
            if "PROCEDURE" in sql.split("\n")[0]:
                for inner in procedure_statements(procedure_body(sql)):
                    if not inner.startswith(OPAQUE):
                        out.append(Statement(path.parent.name, inner, sqlglot.parse_one(inner, read="redshift"), True))
    return tuple(out)


@functools.cache
def procedure_codes(path: Path, kind: str = "sync") -> tuple[str, ...]:
    """Procedure bodies without comments, as text (for what sqlglot keeps opaque): the
    syncs (`incremental_sync_<t>(p_max_records)`), or the record isolations ("isolate").
    The scheduled `incremental_sync_<t>()` is one CALL of the sync."""
    texts = render_files(_example(path), "redshift", str(path.relative_to(REPO))).values()
    marker = "(p_max_records bigint)" if kind == "sync" else "(p_reason "
    procs = [
        s for text in texts for s in split_statements(text) if "PROCEDURE" in s.split("\n")[0] and marker in s.split("\n")[0]
    ]
    return tuple("\n".join(line.split("--")[0] for line in procedure_body(p).splitlines()) for p in procs)


def nodes(path: Path, kind: type[exp.Expression] | tuple[type[exp.Expression], ...]):
    for st in rendering(path):
        for node in st.tree.find_all(kind):
            yield st, node


def anonymous(path: Path, name: str):
    for st, node in nodes(path, exp.Anonymous):
        if node.name.upper() == name:
            yield st, node


def unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def named(st: Statement, node: exp.Expression) -> exp.Expression:
    """What a column of the statement named `_b_...` or `_x_...` (a value bounded, or its
    text, at a level of its own) stands for: the expression the statement names so."""
    node = unparen(node)
    if isinstance(node, exp.Column) and node.name.startswith(("_b_", "_x_")):
        (definition,) = {a.this for a in st.tree.find_all(exp.Alias) if a.alias == node.name}
        return unparen(definition)
    return node


def ancestors(node: exp.Expression):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


def where(st: Statement, node: exp.Expression) -> str:
    return f"{st.example}: {node.sql('redshift')[:300]}"


examples = pytest.mark.parametrize("path", EXAMPLE_PIPELINES, ids=lambda p: p.parent.name)


@examples
def test_rendering_has_procedure_statements(path: Path):
    # The rules below would pass vacuously on an empty rendering.
    statements = rendering(path)
    assert sum(st.in_procedure for st in statements) > 10
    assert any(isinstance(n, exp.Cast) for st in statements for n in st.tree.find_all(exp.Cast))


@examples
def test_regexp_substr_no_match_is_null_before_any_null_test(path: Path):
    # r_REGEXP_SUBSTR: "If the function can't match the regular expression to any
    # characters in the string, it returns an empty string." COALESCE(REGEXP_SUBSTR(..), x)
    # would never fall back: every result that reaches a NULL test is NULLIF(.., '').
    seen = 0
    for st, node in nodes(path, exp.RegexpExtract):
        seen += 1
        parent = node.parent
        if isinstance(parent, exp.Nullif) and parent.expression.this == "" and parent.expression.is_string:
            continue
        null_tests = [a for a in ancestors(node) if isinstance(a, (exp.Coalesce, exp.Is, exp.Nullif))]
        assert not null_tests, f"REGEXP_SUBSTR without NULLIF(.., '') under a NULL test: {where(st, null_tests[0])}"
    assert seen or path.parent.name == "salesdb"


@examples
def test_every_json_serialize_is_bounded_by_json_size(path: Path):
    # JSON_SERIALIZE: "the JSON_SERIALIZE function returns an error when the JSON format
    # exceeds the VARCHAR limit of the system. To check the size of a SUPER expression, see
    # the JSON_SIZE function." Its argument is NULL past 65,535 bytes, and so is that of the
    # VARCHAR cast of a string (r_enable_large_strings_opt_in: SUPER strings up to
    # 16,000,000 bytes when opted in).
    seen = 0
    for st, node in anonymous(path, "JSON_SERIALIZE"):
        seen += 1
        (arg,) = node.expressions
        arg = named(st, arg)
        assert isinstance(arg, exp.Case) and len(arg.args["ifs"]) == 1 and arg.args.get("default") is None, where(st, node)
        cond, value = arg.args["ifs"][0].this, arg.args["ifs"][0].args["true"]
        assert isinstance(cond, exp.LTE) and cond.expression.is_int and int(cond.expression.this) <= 65535, where(st, node)
        size = cond.this
        assert isinstance(size, exp.Anonymous) and size.name.upper() == "JSON_SIZE", where(st, node)
        assert size.expressions[0] == value, where(st, node)
    assert seen
    # The string branch beside it: CASE WHEN IS_VARCHAR(x) THEN x::varchar(65535), x bounded too.
    strings = 0
    for st, cast in nodes(path, exp.Cast):
        branch = cast.parent
        if isinstance(branch, exp.If) and "IS_VARCHAR" in branch.this.sql("redshift").upper() and branch.args.get("true") is cast:
            strings += 1
            arg = named(st, cast.this)
            assert isinstance(arg, exp.Case) and "JSON_SIZE" in arg.args["ifs"][0].this.sql("redshift"), where(st, cast)
    assert strings


def _text_valued(node: exp.Expression) -> bool:
    node = unparen(node)
    if isinstance(node, TEXT_FUNCTIONS):
        return True
    return isinstance(node, exp.Anonymous) and node.name.upper() in TEXT_FUNCTION_NAMES


def _branch_result(node: exp.Expression) -> bool:
    """The node is (under parentheses) the THEN or ELSE value of a CASE."""
    child, parent = node, node.parent
    while isinstance(parent, exp.Paren):
        child, parent = parent, parent.parent
    if isinstance(parent, exp.If):
        return parent.args.get("true") is child
    return isinstance(parent, exp.Case) and parent.args.get("default") is child


def _super_reference(node: exp.Expression) -> bool:
    """A SUPER value: a PartiQL navigation or a column holding a field read as JSON. Casts
    of SUPER return NULL on error (r_cast_super_null_on_error, which the procedures set)."""
    node = unparen(node)
    if isinstance(node, exp.Dot):
        return True
    return isinstance(node, exp.Column) and (
        re.match(r"^_j_[ikv][0-9]+$", node.name) is not None
        or node.name in ("_source_ts_ms", "scale", "value")
        or (node.table == "_src")
    )


@examples
def test_no_cast_of_event_data_outside_a_total_form(path: Path):
    # Redshift may evaluate a CASE branch for rows the CASE never selects (exmergo/dex#307:
    # "it evaluates the branch for rows it never selects ... Invalid digit"): a cast is total
    # only when its own argument is valid on every row. So no cast parses the result of a
    # text function directly, and no cast that could fail is a CASE branch result.
    violations = []
    for st, cast in nodes(path, exp.Cast):
        if cast.to.this in TEXT_TYPES:
            continue
        arg = unparen(cast.this)
        if _text_valued(arg) and not (isinstance(arg, exp.Anonymous) and arg.name.upper() == "TIMEOFDAY"):
            violations.append(where(st, cast))
        elif _branch_result(cast) and not (_super_reference(arg) or isinstance(arg, (exp.Case, exp.Literal, exp.Null))):
            violations.append(where(st, cast))
    assert not violations, "\n".join(violations[:5])


@examples
def test_raising_conversions_get_only_checked_arguments(path: Path):
    # TO_VARBYTE(text, 'base64') raises on text that is not base64 (r_TO_VARBYTE), JSON_PARSE
    # on text that is not JSON (JSON_PARSE; CAN_JSON_PARSE tells it): their argument is a
    # CASE that checks it, never a CASE around them.
    # A column from a level of the stage query counts when that level's definition is such
    # a CASE.
    for st, node in [*anonymous(path, "TO_VARBYTE"), *nodes(path, exp.ParseJSON)]:
        arg = unparen(node.this if isinstance(node, exp.ParseJSON) else node.expressions[0])
        if isinstance(arg, exp.Column):
            defined = [a.this for a in st.tree.find_all(exp.Alias) if a.alias == arg.name]
            assert len(defined) == 1, where(st, node)
            arg = unparen(defined[0])
        assert isinstance(arg, exp.Case) and arg.args.get("default") is None, where(st, node)
        if isinstance(node, exp.ParseJSON):
            cond = arg.args["ifs"][0].this
            assert "CAN_JSON_PARSE" in cond.sql("redshift").upper(), where(st, node)


@examples
def test_character_prefixes_fit_the_byte_length_of_their_column(path: Path):
    # r_Character_types: VARCHAR(n) lengths are in bytes, not characters; SUBSTRING counts
    # characters, so SUBSTRING(x, 1, n) of multi-byte text does not fit VARCHAR(n). A
    # prefix kept as text is tested with OCTET_LENGTH and cut to n / 4 characters (UTF-8
    # takes at most 4 bytes a character); other prefixes are parsed (cast to a number)
    # or compared.
    seen = 0
    for st, node in nodes(path, exp.Substring):
        start, length = node.args.get("start"), node.args.get("length")
        if not (start is not None and start.is_int and int(start.this) == 1 and length is not None and length.is_int):
            continue
        seen += 1
        if any(isinstance(a, exp.Cast) and a.to.this not in TEXT_TYPES or isinstance(a, exp.FromBase) for a in ancestors(node)):
            continue  # parsed as a number (CAST, STRTOL)
        if isinstance(node.parent, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
            continue  # compared, not kept
        case = node.parent
        assert isinstance(case, exp.Case) and case.args.get("default") is node, where(st, node)
        cond = case.args["ifs"][0].this
        assert isinstance(cond, exp.LTE) and cond.this.sql().upper().startswith("OCTET_LENGTH"), where(st, case)
        assert 4 * int(length.this) <= int(cond.expression.this), where(st, case)
    assert seen


def _control_tables(pipeline: Pipeline) -> tuple[set[str], set[str]]:
    targets, control = set(), set()
    for table in pipeline.tables:
        n = table_names(pipeline, table)
        targets.add(f'"{n.schema}"."{n.target}"')
        control |= {f'"{n.schema}"."{name}"' for name in (n.watermark, n.deleted_keys, n.stage)}
    return targets, control


def _locked(sql: str) -> list[str]:
    m = re.search(r"LOCK TABLE ([^;]+);", sql)
    assert m, sql
    return [name.strip() for name in m.group(1).split(",")]


@examples
def test_no_lock_on_a_target(path: Path):
    # r_LOCK: "LOCK ... causes reads and writes on the table to wait" (always exclusive):
    # a LOCK on the target makes every reader wait for the whole CALL (or COPY). Only
    # control tables are locked; the watermark first, which serializes syncs and backfills
    # (c_serial_isolation: the snapshot starts after the lock).
    pipeline = _example(path)
    targets, control = _control_tables(pipeline)
    codes = procedure_codes(path) + procedure_codes(path, "isolate")
    assert codes
    for code in codes:
        locked = _locked(code)
        assert locked[0].endswith('__watermark"') and set(locked) <= control and not set(locked) & targets, locked
    d = dialect_for("redshift", pipeline.schema)
    for table in pipeline.tables:
        locked = _locked(BackfillSql(d, pipeline, table).lock())
        assert locked[0].endswith('__watermark"') and not set(locked) & targets, locked


@examples
def test_run_times_have_microseconds(path: Path):
    # r_GETDATE: GETDATE() returns the statement start in whole seconds ("2008-12-04
    # 16:10:43"); r_SYSDATE is the transaction start (one value for the whole CALL).
    # r_TIMEOFDAY_function: the statement's time with microseconds ("Thu Sep 19
    # 22:53:50.333525 2013 UTC"), read back with TO_TIMESTAMP's US (r_FORMAT_strings).
    for code in procedure_codes(path) + procedure_codes(path, "isolate"):
        assert not re.search(r"\bGETDATE\s*\(", code, re.I) and not re.search(r"\bSYSDATE\b", code, re.I)
        assert "v_started := " + RedshiftDialect().now() + ";" in code
    clocks = [st for st, node in nodes(path, exp.StrToTime)]
    assert clocks and all("TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY')" in st.sql for st in clocks)


@examples
def test_listagg_results_stay_within_varchar(path: Path):
    # r_LISTAGG: a result over 65,535 bytes fails ("Result size exceeds LISTAGG limit"),
    # every run, for a topic with enough partitions. Each aggregated item is kept only
    # while a running byte count stays below the limit (room left for ' (+N more)').
    seen = 0
    for st, node in nodes(path, exp.GroupConcat):
        seen += 1
        arg = unparen(node.this)
        assert isinstance(arg, exp.Case) and arg.args.get("default") is None, where(st, node)
        cond = arg.args["ifs"][0].this
        assert isinstance(cond, exp.LTE) and int(cond.expression.this) + 32 <= 65535, where(st, node)
        windows = [w for w in st.tree.find_all(exp.Window) if isinstance(w.this, exp.Sum)]
        assert any(
            "OCTET_LENGTH" in w.this.sql().upper() and w.this.sql() in arg.sql() or cond.this.name == "pos__" for w in windows
        ), where(st, node)
    assert seen


@examples
def test_procedures_set_what_their_casts_rely_on_and_analyze_the_stage(path: Path):
    # r_cast_super_null_on_error: casts of SUPER return NULL instead of failing when on
    # (the default); set by the procedure so a parameter group cannot turn it off.
    # stored-procedure-constraints: ANALYZE is allowed in a procedure (VACUUM is not).
    for code in procedure_codes(path):
        assert "SET LOCAL cast_super_null_on_error TO on;" in code
        assert code.index("SET LOCAL cast_super_null_on_error") < code.index("INSERT INTO")
        assert re.search(r"ANALYZE \"[^\"]+\"\.\"[^\"]+__stage\" \(", code)


def test_drop_procedure_has_no_if_exists_on_redshift():
    # r_DROP_PROCEDURE: "DROP PROCEDURE sp_name ( [ [ argname ] [ argmode ] argtype [, ...] ] )".
    d = dialect_for("redshift", "cdc")
    tree = sqlglot.parse_one(d.drop_procedure('"cdc"."incremental_sync_x"'), read="redshift")
    assert isinstance(tree, exp.Drop) and tree.args["kind"] == "PROCEDURE" and not tree.args.get("exists")
    golden = (REPO / "tests" / "golden" / "alembic_upgrade_redshift.sql").read_text()
    assert not re.search(r"DROP PROCEDURE IF EXISTS", golden)


def test_mixed_case_topics_name_the_parameter_group_setting(capsys):
    # r_enable_case_sensitive_identifier: "If you use auto refresh for materialized views,
    # we recommend setting the enable_case_sensitive_identifier value in your cluster or
    # workgroup's parameter group." A streaming MV names its topic as a quoted identifier.
    salesdb = _example(EXAMPLES / "salesdb" / "pipeline.toml")
    (warning,) = auto_refresh_requirements(salesdb, dialect_for("redshift"))
    assert (
        "salesdb.salesdb.CUSTOMER" in warning and "ParameterName=enable_case_sensitive_identifier,ParameterValue=true" in warning
    )
    files = render_files(salesdb, "redshift", "x")
    mv = next(s for s in split_statements(files["customer.sql"]) if "CREATE MATERIALIZED VIEW" in s)
    assert "enable_case_sensitive_identifier = true in the parameter group" in mv
    lower = _example(EXAMPLES / "debezium_shapes" / "pipeline.toml")
    assert (
        all(t.topic == t.topic.lower() for t in lower.tables) and auto_refresh_requirements(lower, dialect_for("redshift")) == []
    )
    assert auto_refresh_requirements(salesdb, dialect_for("postgres")) == []  # no streaming view locally


@examples
def test_backfill_parses_the_json_it_stages_from_parquet(path: Path):
    # ingest-super: COPY from Parquet loads a string column into a SUPER column as a SUPER
    # string, not as the JSON it holds (nested types need SERIALIZETOJSON). The backfill
    # writes JSON text: it is staged as VARCHAR and parsed into the target's SUPER column.
    pipeline = _example(path)
    d = dialect_for("redshift", pipeline.schema)
    checked = 0
    for table in pipeline.tables:
        b = BackfillSql(d, pipeline, table)
        stage = sqlglot.parse_one(b.stage_table(), read="redshift")
        kinds = {col.name: col.args["kind"].this for col in stage.find_all(exp.ColumnDef)}
        target = table_names(pipeline, table).target
        inserts = [sqlglot.parse_one(s.sql, read="redshift") for s in b.merge() if s.sql.startswith("INSERT INTO")]
        inserts = [i for i in inserts if i.this.find(exp.Table).name == target]
        assert inserts
        for col in table.columns:
            if col.sql_type.family != "super":
                continue
            checked += 1
            assert kinds[col.target_name] == exp.DataType.Type.VARCHAR, b.stage_table()
            for insert in inserts:
                parsed = [p for p in insert.find_all(exp.ParseJSON) if col.target_name in p.sql()]
                assert parsed and all(isinstance(unparen(p.this), exp.Case) for p in parsed), insert.sql("redshift")
    assert checked or path.parent.name != "inventory_pg"


def test_records_the_stream_skipped_are_listed_by_status(capsys):
    # r_SYS_STREAM_SCAN_ERRORS: records streaming ingestion could not ingest are logged
    # there (error_reason per mv_name), and nothing else tells the caller.
    from rich.console import Console

    from sync.cli.report import print_status
    from sync.operations.runner import TableStatus

    d = dialect_for("redshift", "cdc")
    tree = sqlglot.parse_one(d.stream_errors_sql("cdc", "customer__stream"), read="redshift")
    assert tree.find(exp.Table).name.upper() == "SYS_STREAM_SCAN_ERRORS"
    assert {"'customer__stream'", "'cdc.customer__stream'"} <= {lit.sql() for lit in tree.find_all(exp.Literal)}
    assert dialect_for("postgres", "cdc").stream_errors_sql("cdc", "customer__stream") is None
    row = TableStatus("customer", True, {0: 5}, 0, 3, None, None, 0, [], [], [("Record size exceeds limit", 2)])
    print_status([row], Console(width=120))
    assert "customer: 2 record(s) skipped by streaming ingestion: Record size exceeds limit" in capsys.readouterr().out


@examples
def test_updates_read_one_stored_row_per_key(path: Path):
    # r_CREATE_TABLE_NEW: primary keys are informational, so a key can be stored twice; an
    # UPDATE ... FROM the target would then match a stage row twice. Every UPDATE that reads
    # the target reads it through a subquery with one row per key.
    pipeline = _example(path)
    targets = {table_names(pipeline, t).target for t in pipeline.tables}
    updates = list(_updates_from(path))
    for st, update, source in updates:
        direct = [t for t in source.find_all(exp.Table) if t.name in targets and not t.find_ancestor(exp.Subquery)]
        assert not direct, where(st, update)
    assert updates


def test_a_numbered_lookup_of_stored_rows_is_read_for_the_newest_row_only():
    # r_CREATE_TABLE_NEW: primary keys are informational, so a key can be stored twice. The
    # lookup of what is stored numbers each key's stored rows newest first (`stored_rn__`);
    # the UPDATE that reads it keeps the first (`stored_rn__ = 1`, in its join or WHERE),
    # else a key stored twice matches a stage row twice.
    lookups = 0
    for path in EXAMPLE_PIPELINES:
        for st, update in nodes(path, exp.Update):
            numbered = [s for s in update.find_all(exp.Select) if any(e.alias_or_name == "stored_rn__" for e in s.expressions)]
            kept = [
                eq
                for eq in update.find_all(exp.EQ)
                if isinstance(eq.this, exp.Column) and eq.this.name == "stored_rn__" and eq.expression.sql() == "1"
            ]
            assert len(kept) == len(numbered), where(st, update)
            lookups += len(numbered)
    assert lookups >= 23


def _updates_from(path: Path):
    """The UPDATE statements with a FROM list, each with it."""
    for st, update in nodes(path, exp.Update):
        source = update.args.get("from_") or update.args.get("from")
        if source is not None:
            yield st, update, source


@examples
def test_no_outer_join_in_the_from_list_of_an_update(path: Path):
    # r_UPDATE, usage notes: "Left, right, and full outer joins aren't supported in the FROM
    # clause of an UPDATE statement; they return the following error: ERROR: Target table
    # must be part of an equijoin predicate. If you need to specify an outer join, use a
    # subquery". An outer join inside a subquery of the FROM list is that subquery's own.
    updates = list(_updates_from(path))
    for st, update, source in updates:
        joins = [*(source.this.args.get("joins") or []), *(source.args.get("joins") or [])]
        assert not [j for j in joins if j.side], where(st, update)
    assert updates
