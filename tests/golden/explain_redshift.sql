CREATE TEMPORARY TABLE "explain_pending" (LIKE "cdc"."customer__stage");

CREATE TEMPORARY TABLE "explain_retained" (LIKE "cdc"."customer__stage");

CREATE TEMPORARY TABLE "explain_quarantined" (LIKE "cdc"."customer__stage");

CREATE TEMPORARY TABLE "explain_watermark" (LIKE "cdc"."customer__watermark");

CREATE TEMPORARY TABLE "explain_unread" (LIKE "cdc"."customer__watermark");

CREATE TEMPORARY TABLE "explain_sealed" (LIKE "cdc"."customer__watermark");

CREATE TEMPORARY TABLE "explain_target" (LIKE "cdc"."customer");

CREATE TEMPORARY TABLE "explain_deleted" (LIKE "cdc"."customer__deleted");

CREATE TEMPORARY TABLE "explain_replaying" (LIKE "cdc"."customer__quarantine");

CREATE TEMPORARY TABLE "explain_no_quarantine" (LIKE "cdc"."customer__quarantine");

INSERT INTO "explain_watermark" SELECT * FROM "cdc"."customer__watermark";

INSERT INTO "explain_sealed" (kafka_partition, last_offset, last_refresh_time, updated_at)
SELECT -1, -1, TIMESTAMP '9999-12-31 00:00:00', TIMESTAMP '9999-12-31 00:00:00';

INSERT INTO "explain_target" SELECT * FROM "cdc"."customer" t WHERE t."customer_id" = CAST('C001' AS varchar(64));

INSERT INTO "explain_deleted" SELECT * FROM "cdc"."customer__deleted" t WHERE t."customer_id" = CAST('C001' AS varchar(64));

INSERT INTO "explain_replaying" (table_name, kafka_partition, kafka_offset, kafka_timestamp, reason, payload, raw_value, run_started_at, handled, handled_at)
SELECT q.table_name, q.kafka_partition, q.kafka_offset, q.kafka_timestamp, q.reason, q.payload, q.raw_value, q.run_started_at, 'replaying', q.handled_at
FROM "cdc"."customer__quarantine" q WHERE q.table_name = 'customer';

CREATE OR REPLACE PROCEDURE "cdc"."explain_0"(p_max_records bigint)
AS $$
-- redshift-sync explain (table customer): the procedure incremental_sync_customer's steps over
-- temporary tables, in a transaction that is rolled back.
DECLARE
  v_started timestamp; v_wm_before varchar(65535); v_read bigint := 0; v_quarantined bigint := 0; v_positionless bigint := 0; v_partitions bigint := 0;
  v_deletes bigint := 0; v_set_aside bigint := 0; v_unavailable bigint := 0; v_drift bigint := 0; v_replayed bigint := 0; v_not_newer bigint := 0;
  v_until_time timestamp; v_until_partition bigint; v_until_offset bigint;
BEGIN
  -- Pending records: the call's reading of the stream, then the rules of the batch.
  -- 10. Settings this procedure needs, for the CALL's transaction only (SET LOCAL).
  SET LOCAL enable_case_sensitive_identifier TO true;
  SET LOCAL cast_super_null_on_error TO on;
  -- 1. Single flight: a second call (or a backfill) waits here until the first commits,
  --    then sees its watermark, so no record is applied twice. Only the control table
  --    is locked: on Redshift every LOCK is exclusive, and the target stays readable.
  LOCK TABLE "explain_watermark";
  v_started := CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp);
  -- A bounded run (record isolation by the caller) reads the first p_max_records pending
  -- records in (refresh_time, partition, offset) order: a prefix of every partition
  -- (0: none, which tells a failure of the procedure itself from one of a record).
  v_until_time := TIMESTAMP '9999-12-31 00:00:00';
  IF p_max_records < 1 THEN
    v_until_time := TIMESTAMP '1900-01-01 00:00:00';
  ELSIF p_max_records IS NOT NULL THEN
    SELECT x.refresh_time, x.kafka_partition, x.kafka_offset
    INTO v_until_time, v_until_partition, v_until_offset
    FROM (SELECT s.*, ROW_NUMBER() OVER (ORDER BY s.refresh_time, s.kafka_partition, s.kafka_offset) AS read_no
          FROM "cdc"."customer__stream" s
          LEFT JOIN "explain_watermark" w ON w.kafka_partition = s.kafka_partition
          WHERE s.refresh_time >= (SELECT COALESCE(MAX(m.last_refresh_time), TIMESTAMP '1900-01-01 00:00:00') FROM "explain_watermark" m)
            AND s.kafka_offset > COALESCE(w.last_offset, -1)) x
    WHERE x.read_no = p_max_records;
    v_until_time := COALESCE(v_until_time, TIMESTAMP '9999-12-31 00:00:00');
  END IF;
  -- 2./3. Records past the watermark (refresh_time only prunes), classified, typed and ranked
  --       per key, into the stage. The rules below read the stage and the keys' stored state, never a record's JSON again.
  INSERT INTO "explain_pending" (
    "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_time", "_refresh_time", "_op", "_action", "_reason",
    "_rn", "_source_ts", "_source_pos", "_rank_pos", "customer_id", "name", "mktsegment", "_unavailable", "_payload",
    "_raw_value", "_drift_img"
  )
  WITH batch AS (SELECT s.kafka_partition AS _kafka_partition, s.kafka_offset AS _kafka_offset,
      s.kafka_timestamp AS _kafka_timestamp, s.refresh_time AS _refresh_time,
      s.payload AS _payload, s.raw_value AS _raw_value,
      CASE WHEN IS_OBJECT(s.payload."schema") THEN s.payload."payload" ELSE s.payload END AS _env,
      CASE WHEN IS_OBJECT(s.key_payload."schema") THEN s.key_payload."payload" ELSE s.key_payload END AS _key_env
    FROM "cdc"."customer__stream" s
    LEFT JOIN "explain_watermark" w ON w.kafka_partition = s.kafka_partition
    WHERE s.refresh_time >= (SELECT COALESCE(MAX(m.last_refresh_time), TIMESTAMP '1900-01-01 00:00:00') FROM "explain_watermark" m)
      AND s.kafka_offset > COALESCE(w.last_offset, -1)
      AND (s.refresh_time < v_until_time
           OR (s.refresh_time = v_until_time
               AND (s.kafka_partition < v_until_partition
                    OR (s.kafka_partition = v_until_partition AND s.kafka_offset <= v_until_offset))))
    UNION ALL
    -- Quarantined records being replayed (at or below the watermark: already read once).
    SELECT r.kafka_partition, r.kafka_offset, r.kafka_timestamp, r.run_started_at, r.payload, r.raw_value,
           CASE WHEN IS_OBJECT(r.payload."schema") THEN r.payload."payload" ELSE r.payload END,
           CAST(NULL AS super)
    FROM "cdc"."customer__quarantine" r
    WHERE r.table_name = 'customer' AND r.handled = 'replaying'),
  batch_1 AS (SELECT f.*, (CASE WHEN JSON_SIZE(f._env."op") <= 65535 THEN f._env."op" END) AS "_b_o0" FROM batch f),
  batch_2 AS (
    SELECT f.*, CASE WHEN IS_VARCHAR(f._b_o0) THEN f._b_o0::varchar(65535) WHEN f._b_o0 IS NOT NULL THEN JSON_SERIALIZE(f._b_o0) END AS "_x_o0"
    FROM batch_1 f),
  envelope AS (
    SELECT f._kafka_partition, f._kafka_offset, f._kafka_timestamp, f._refresh_time, f._payload, f._raw_value, f._env, f._key_env, f._x_o0 AS _op,
           CASE WHEN f._x_o0 = 'd' THEN f._env."before" ELSE f._env."after" END AS _img, f._env."source" AS _src
    FROM batch_2 f),
  envelope_1 AS (SELECT f.*, (CASE WHEN JSON_SIZE(f._src."file") <= 65535 THEN f._src."file" END) AS "_b_p0",
      (CASE WHEN JSON_SIZE(f._src."pos") <= 65535 THEN f._src."pos" END) AS "_b_p1",
      (CASE WHEN JSON_SIZE(f._src."row") <= 65535 THEN f._src."row" END) AS "_b_p2" FROM envelope f),
  envelope_2 AS (
    SELECT f.*, CASE WHEN IS_VARCHAR(f._b_p0) THEN f._b_p0::varchar(65535) WHEN f._b_p0 IS NOT NULL THEN JSON_SERIALIZE(f._b_p0) END AS "_x_p0",
           CASE WHEN IS_VARCHAR(f._b_p1) THEN f._b_p1::varchar(65535) WHEN f._b_p1 IS NOT NULL THEN JSON_SERIALIZE(f._b_p1) END AS "_x_p1",
           CASE WHEN IS_VARCHAR(f._b_p2) THEN f._b_p2::varchar(65535) WHEN f._b_p2 IS NOT NULL THEN JSON_SERIALIZE(f._b_p2) END AS "_x_p2"
    FROM envelope_1 f),
  fields AS (SELECT f._kafka_partition, f._kafka_offset, f._kafka_timestamp, f._refresh_time, f._payload, f._raw_value, f._env, f._img, f._op,
      f._src."ts_ms" AS _ts_ms,
      LPAD(REGEXP_SUBSTR(f._x_p0, '[0-9]*$'), 20, '0') || '.' || LPAD(f._x_p1, 20, '0') || '.' || LPAD(COALESCE(f._x_p2, ''), 20, '0') AS _source_pos,
      f._img."CUST_ID" AS _j_i0, CASE WHEN IS_OBJECT(f._key_env) THEN f._key_env."CUST_ID" ELSE f._key_env END AS _j_k0, f._img."NAME" AS _j_v0,
      f._img."MKTSEGMENT" AS _j_v1 FROM envelope_2 f),
  fields_1 AS (
    SELECT f.*, (CASE WHEN JSON_SIZE(f._j_i0) <= 65535 THEN f._j_i0 END) AS "_b_i0", (CASE WHEN JSON_SIZE(f._j_k0) <= 65535 THEN f._j_k0 END) AS "_b_k0",
           (CASE WHEN JSON_SIZE(f._j_v0) <= 65535 THEN f._j_v0 END) AS "_b_v0", (CASE WHEN JSON_SIZE(f._j_v1) <= 65535 THEN f._j_v1 END) AS "_b_v1"
    FROM fields f),
  fields_2 AS (
    SELECT f.*, CASE WHEN IS_VARCHAR(f._b_i0) THEN f._b_i0::varchar(65535) WHEN f._b_i0 IS NOT NULL THEN JSON_SERIALIZE(f._b_i0) END AS "_x_i0",
           CASE WHEN IS_VARCHAR(f._b_k0) THEN f._b_k0::varchar(65535) WHEN f._b_k0 IS NOT NULL THEN JSON_SERIALIZE(f._b_k0) END AS "_x_k0",
           CASE WHEN IS_VARCHAR(f._b_v0) THEN f._b_v0::varchar(65535) WHEN f._b_v0 IS NOT NULL THEN JSON_SERIALIZE(f._b_v0) END AS "_x_v0",
           CASE WHEN IS_VARCHAR(f._b_v1) THEN f._b_v1::varchar(65535) WHEN f._b_v1 IS NOT NULL THEN JSON_SERIALIZE(f._b_v1) END AS "_x_v1"
    FROM fields_1 f),
  fields_3 AS (SELECT f.*,
      COALESCE(f._x_v0 IN ('__debezium_unavailable_value', 'X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==', '["__debezium_unavailable_value"]'), false) AS "_u_v0",
      COALESCE(f._x_v1 IN ('__debezium_unavailable_value', 'X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==', '["__debezium_unavailable_value"]'), false) AS "_u_v1"
    FROM fields_2 f),
  typed AS (SELECT f.*, CAST(f._ts_ms AS bigint) AS _source_ts_ms, NOT (f._ts_ms IS NULL) AS _has_source_ts,
      COALESCE(CAST(CASE WHEN OCTET_LENGTH(f._x_i0) <= 64 THEN f._x_i0 END AS varchar(64)), CAST(CASE WHEN OCTET_LENGTH(f._x_k0) <= 64
          THEN f._x_k0 END AS varchar(64))) AS "customer_id",
      CASE WHEN f._u_v0 THEN NULL ELSE CAST(CASE WHEN OCTET_LENGTH(f._x_v0) <= 256 THEN f._x_v0 END AS varchar(256)) END AS "name",
      CASE WHEN f._u_v1 THEN NULL ELSE CAST(CASE WHEN OCTET_LENGTH(f._x_v1) <= 64 THEN f._x_v1 END AS varchar(64)) END AS "mktsegment",
      NULLIF('|' || CASE WHEN f._u_v0 THEN 'name|' ELSE '' END || CASE WHEN f._u_v1 THEN 'mktsegment|' ELSE '' END, '|') AS _unavailable,
      CASE WHEN f._op IN ('c', 'r', 'u') AND IS_OBJECT(f._img) AND NOT (f._j_i0 IS NOT NULL AND f._j_v0 IS NOT NULL AND f._j_v1 IS NOT NULL
          AND GET_NUMBER_ATTRIBUTES(f._img) = 3) THEN f._img END AS _drift_img
    FROM fields_3 f),
  checked AS (SELECT t.*,
      CASE
        WHEN t._raw_value IS NOT NULL THEN 1
        WHEN (t._env IS NULL) THEN 2
        WHEN NOT IS_OBJECT(t._env) THEN 3
        WHEN t._op IS NULL THEN 4
        WHEN t._op = 't' THEN 5
        WHEN t._op NOT IN ('c', 'r', 'u', 'd') THEN 6
        WHEN t._op <> 'd' AND ((t._img IS NULL) OR NOT IS_OBJECT(t._img)) THEN 7
        WHEN t."customer_id" IS NULL THEN 8
        WHEN t._has_source_ts AND (t._source_ts_ms IS NULL OR t._source_ts_ms NOT BETWEEN 0 AND 253402300799999) THEN 9
        WHEN t._op <> 'd' AND NOT (t._j_v0 IS NULL) AND t."name" IS NULL AND NOT t._u_v0 THEN 10
        WHEN t._op <> 'd' AND NOT (t._j_v1 IS NULL) AND t."mktsegment" IS NULL AND NOT t._u_v1 THEN 11
        WHEN t._op = 'd' THEN 12
        ELSE 0
      END AS _check_no FROM typed t),
  classified AS (SELECT t._kafka_partition, t._kafka_offset, t._kafka_timestamp, t._refresh_time, t._raw_value, t._op,
      CASE WHEN t._source_ts_ms BETWEEN 0 AND 253402300799999 THEN t._source_ts_ms END AS _source_ts_ms, t._source_pos,
      t._unavailable, t._drift_img, t."customer_id", t."name", t."mktsegment",
      CASE t._check_no WHEN 0 THEN 'upsert' WHEN 2 THEN 'tombstone' WHEN 5 THEN 'truncate' WHEN 12 THEN 'delete' ELSE 'quarantine' END AS _action,
      CASE t._check_no
        WHEN 1 THEN 'value is not valid JSON'
        WHEN 3 THEN 'value is not a JSON object'
        WHEN 4 THEN 'no op field: not a Debezium change event'
        WHEN 6 THEN 'unknown op "' || CASE WHEN OCTET_LENGTH(t._op) <= 64 THEN t._op ELSE SUBSTRING(t._op, 1, 16) END || '"'
        WHEN 7 THEN 'no row image: after is missing or not an object'
        WHEN 8 THEN 'primary key field CUST_ID is missing or not a varchar(64)'
        WHEN 9 THEN 'source time (ts_ms) is not milliseconds since the epoch between 1970 and 9999'
        WHEN 10 THEN 'field NAME does not convert to varchar(256)'
        WHEN 11 THEN 'field MKTSEGMENT does not convert to varchar(64)'
      END AS _reason,
      CASE WHEN t._check_no IN (1, 3, 4, 6, 7, 8, 9, 10, 11) OR t._unavailable IS NOT NULL THEN t._payload END AS _quarantine_payload,
      MAX(t._kafka_timestamp) OVER (PARTITION BY t._kafka_partition ORDER BY t._kafka_offset
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _kafka_time FROM checked t)
  SELECT c._kafka_partition, c._kafka_offset, c._kafka_timestamp, c._kafka_time, c._refresh_time,
         CASE WHEN OCTET_LENGTH(c._op) <= 64 THEN c._op ELSE SUBSTRING(c._op, 1, 16) END, c._action, c._reason,
         ROW_NUMBER() OVER (
           PARTITION BY CASE WHEN c._action IN ('upsert', 'delete') THEN 1 ELSE 0 END, c."customer_id"
           ORDER BY c._source_pos DESC NULLS LAST, c._kafka_time DESC NULLS LAST, c._kafka_partition DESC, c._kafka_offset DESC),
         (TIMESTAMP 'epoch' + (c._source_ts_ms / 1000) * INTERVAL '1 second' + (c._source_ts_ms % 1000) * INTERVAL '1 millisecond'),
         c._source_pos, c._source_pos, c."customer_id", c."name", c."mktsegment", c._unavailable, c._quarantine_payload,
         CASE WHEN c._action = 'quarantine' THEN c._raw_value END, c._drift_img
  FROM classified c;
  GET DIAGNOSTICS v_read := ROW_COUNT;
  -- What the batch needs of the rarely needed steps, what it replays, and the watermark it found.
  SELECT c.*, w.watermark
  INTO v_drift, v_quarantined, v_partitions, v_deletes, v_positionless, v_unavailable, v_replayed, v_wm_before
  FROM (SELECT COUNT(_drift_img) AS drift, COUNT(CASE WHEN _action = 'quarantine' THEN 1 END) AS quarantined,
               COUNT(DISTINCT _kafka_partition) AS partitions, COUNT(CASE WHEN _action = 'delete' THEN 1 END) AS deletes,
               COUNT(CASE WHEN _source_pos IS NULL AND _action IN ('upsert', 'delete') THEN 1 END) AS positionless,
               COUNT(CASE WHEN _unavailable IS NOT NULL THEN 1 END) AS unavailable,
               (SELECT COUNT(*) FROM "cdc"."customer__quarantine" WHERE table_name = 'customer' AND handled = 'replaying') AS replayed
        FROM "explain_pending") c,
       (SELECT LISTAGG(CASE WHEN p.pos__ <= 65503 THEN p.item__ END, ',') WITHIN GROUP (ORDER BY p.order__)
               || COALESCE(' (+' || CAST(NULLIF(COUNT(CASE WHEN p.pos__ > 65503 THEN 1 END), 0) AS varchar(20)) || ' more)', '') AS watermark
        FROM (SELECT i.*, SUM(OCTET_LENGTH(i.item__) + 1) OVER (ORDER BY i.order__ ROWS UNBOUNDED PRECEDING) AS pos__
              FROM (SELECT r.*, CAST(r.kafka_partition AS varchar(20)) || ':' || CAST(r.last_offset AS varchar(20)) AS item__,
                  r.kafka_partition AS order__ FROM "explain_watermark" r) i) p) w;
  -- 4. Events without a source position: each takes the newest position seen before it
  --    for its key in Kafka order (so it supersedes what precedes it and loses to what
  --    follows), and ranks after what is stored for its key (row or deleted key).
  IF v_positionless > 0 THEN
    UPDATE "explain_pending" s SET _rank_pos = r.rank_pos, _rn = r.rn
    FROM (SELECT p.*, ROW_NUMBER() OVER (PARTITION BY p."customer_id"
                        ORDER BY p.rank_pos DESC NULLS LAST, p._kafka_time DESC NULLS LAST, p._kafka_partition DESC, p._kafka_offset DESC) AS rn
          FROM (SELECT x."customer_id", x._kafka_partition, x._kafka_offset, x._kafka_time,
                       CASE WHEN x._source_pos IS NULL THEN GREATEST(t._source_pos,
                         MAX(x._source_pos) OVER (PARTITION BY x."customer_id"
                           ORDER BY x._kafka_time ASC NULLS FIRST, x._kafka_partition, x._kafka_offset ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW))
                       ELSE x._rank_pos END AS rank_pos
                FROM "explain_pending" x
                LEFT JOIN (SELECT k.*, ROW_NUMBER() OVER (PARTITION BY k."customer_id"
                              ORDER BY k._source_pos DESC NULLS LAST, k._kafka_partition DESC, k._kafka_offset DESC) AS stored_rn__
                            FROM (SELECT t."customer_id", t._source_pos, t._kafka_partition, t._kafka_offset FROM "explain_target" t
                                  WHERE EXISTS (SELECT 1 FROM "explain_pending" y WHERE y._source_pos IS NULL AND y._action IN ('upsert', 'delete')
                                      AND y."customer_id" = t."customer_id")
                                  UNION ALL SELECT t."customer_id", t._source_pos, t._kafka_partition, t._kafka_offset FROM "explain_deleted" t
                                  WHERE EXISTS (SELECT 1 FROM "explain_pending" y WHERE y._source_pos IS NULL AND y._action IN ('upsert', 'delete')
                                      AND y."customer_id" = t."customer_id")) k) t ON t."customer_id" = x."customer_id" AND t.stored_rn__ = 1
                WHERE x._action IN ('upsert', 'delete')
                  AND EXISTS (SELECT 1 FROM "explain_pending" y WHERE y._source_pos IS NULL AND y._action IN ('upsert', 'delete')
                      AND y."customer_id" = x."customer_id")) p) r
    WHERE s."customer_id" = r."customer_id" AND s._kafka_partition = r._kafka_partition AND s._kafka_offset = r._kafka_offset;
  END IF;
  -- 3. (TOAST) Unchanged out-of-line values arrive as a placeholder and keep what is known.
  IF v_unavailable > 0 THEN
    UPDATE "explain_pending" s SET "name" = CASE WHEN s._unavailable NOT LIKE '%|name|%' THEN s."name" WHEN u.rn0 IS NOT NULL THEN u.batch0 WHEN u.stored
        THEN u.stored0 ELSE s."name" END,
           "mktsegment" = CASE WHEN s._unavailable NOT LIKE '%|mktsegment|%' THEN s."mktsegment" WHEN u.rn1 IS NOT NULL THEN u.batch1 WHEN u.stored
               THEN u.stored1 ELSE s."mktsegment" END,
           _action = CASE WHEN u.unknown__ <> '|' THEN 'quarantine' ELSE s._action END,
           _unavailable = CASE WHEN u.unknown__ <> '|' THEN u.unknown__ ELSE s._unavailable END
    FROM (SELECT v.*, CASE WHEN NOT (v.stored OR v.older) THEN '|' || CASE WHEN v._unavailable LIKE '%|name|%' AND v.rn0 IS NULL THEN 'name|'
        ELSE '' END || CASE WHEN v._unavailable LIKE '%|mktsegment|%' AND v.rn1 IS NULL THEN 'mktsegment|' ELSE '' END END AS unknown__
          FROM (SELECT w."customer_id", w._unavailable, t.stored_rn__ IS NOT NULL AND m.deleted__ IS NULL AND NOT t.deleted__ AS stored,
                       COALESCE(w._source_pos < t._source_pos, false) AS older,
                       CASE WHEN m.deleted__ IS NULL OR m.rn0 < m.deleted__ THEN m.rn0 END AS rn0, p0."name" AS batch0, t."name" AS stored0, CASE
                           WHEN m.deleted__ IS NULL OR m.rn1 < m.deleted__ THEN m.rn1 END AS rn1, p1."mktsegment" AS batch1, t."mktsegment" AS stored1
                FROM "explain_pending" w
                LEFT JOIN (SELECT "customer_id",
                            MIN(CASE WHEN _action = 'upsert' AND COALESCE(_unavailable, '') NOT LIKE '%|name|%' THEN _rn END) AS rn0,
                            MIN(CASE WHEN _action = 'upsert' AND COALESCE(_unavailable, '') NOT LIKE '%|mktsegment|%' THEN _rn END) AS rn1,
                            MIN(CASE WHEN _action = 'delete' THEN _rn END) AS deleted__
                           FROM "explain_pending" WHERE _action IN ('upsert', 'delete')
                               AND _rn > 1 GROUP BY "customer_id") m ON m."customer_id" = w."customer_id"
                LEFT JOIN "explain_pending" p0 ON p0."customer_id" = w."customer_id" AND p0._rn = m.rn0 AND p0._action = 'upsert'
                LEFT JOIN "explain_pending" p1 ON p1."customer_id" = w."customer_id" AND p1._rn = m.rn1 AND p1._action = 'upsert'
                LEFT JOIN (SELECT k.*, ROW_NUMBER() OVER (PARTITION BY k."customer_id"
                              ORDER BY k._source_pos DESC NULLS LAST, k._kafka_partition DESC, k._kafka_offset DESC) AS stored_rn__
                            FROM (SELECT t."customer_id", t._source_pos, t._kafka_partition, t._kafka_offset, t."name", t."mktsegment",
                                false AS deleted__ FROM "explain_target" t
                                  WHERE EXISTS (SELECT 1 FROM "explain_pending" x WHERE x._rn = 1 AND x._action = 'upsert' AND x._unavailable IS NOT NULL
                                      AND x."customer_id" = t."customer_id")
                                  UNION ALL SELECT t."customer_id", t._source_pos, t._kafka_partition, t._kafka_offset, NULL, NULL,
                                      true FROM "explain_deleted" t
                                  WHERE EXISTS (SELECT 1 FROM "explain_pending" x WHERE x._rn = 1 AND x._action = 'upsert' AND x._unavailable IS NOT NULL
                                      AND x."customer_id" = t."customer_id")) k) t ON t."customer_id" = w."customer_id" AND t.stored_rn__ = 1
                WHERE w._rn = 1 AND w._action = 'upsert' AND w._unavailable IS NOT NULL) v) u
    WHERE s._rn = 1 AND s._action = 'upsert' AND s._unavailable IS NOT NULL AND u."customer_id" = s."customer_id";
    UPDATE "explain_pending" s SET _rn = CASE WHEN s._action = 'delete' THEN 1 ELSE s._rn END,
        _action = CASE WHEN s._action = 'delete' THEN s._action ELSE 'quarantine' END,
        _reason = SUBSTRING(CASE WHEN s._action = 'delete' THEN s._reason
            ELSE 'no earlier value is known for the TOAST placeholder (__debezium_unavailable_value) in ' || BTRIM(s._unavailable, '|') END, 1, 1000)
    FROM (SELECT w."customer_id", MIN(x._rn) AS deleted__
          FROM "explain_pending" w LEFT JOIN "explain_pending" x ON x."customer_id" = w."customer_id" AND x._action = 'delete' AND x._rn > 1
          WHERE w._rn = 1 AND w._action = 'quarantine' AND w._reason IS NULL GROUP BY w."customer_id") k
    WHERE s."customer_id" = k."customer_id" AND s._rn <= COALESCE(k.deleted__, s._rn)
      AND (s._action IN ('upsert', 'delete') AND s._rn > 1 OR s._action = 'quarantine' AND s._reason IS NULL);
    GET DIAGNOSTICS v_set_aside := ROW_COUNT;
    v_quarantined := v_quarantined + v_set_aside;
  END IF;
  -- 5. Never regress: a winner older than what is stored for its key (row or deleted key) is stale, and so is
  --    a re-sent copy of it; a change at the stored position (a compressed MySQL transaction's) is judged next.
  UPDATE "explain_pending" s SET _action = CASE WHEN s._source_pos = t._source_pos
      AND (s._action = 'upsert' AND (t.deleted__ OR (t."name" <> s."name" OR (t."name" IS NULL) <> (s."name" IS NULL))
          OR (t."mktsegment" <> s."mktsegment" OR (t."mktsegment" IS NULL) <> (s."mktsegment" IS NULL)))
           OR s._action = 'delete' AND NOT t.deleted__) THEN s._action ELSE 'stale' END
  FROM (SELECT k.*, ROW_NUMBER() OVER (PARTITION BY k."customer_id"
           ORDER BY k._source_pos DESC NULLS LAST, k._kafka_partition DESC, k._kafka_offset DESC) AS stored_rn__
         FROM (SELECT t."customer_id", t._source_pos, t._kafka_partition, t._kafka_offset, false AS deleted__, t."name", t."mktsegment" FROM "explain_target" t
               WHERE EXISTS (SELECT 1 FROM "explain_pending" y WHERE y._rn = 1 AND y._action IN ('upsert', 'delete') AND y."customer_id" = t."customer_id")
               UNION ALL SELECT t."customer_id", t._source_pos, t._kafka_partition, t._kafka_offset, true, NULL, NULL FROM "explain_deleted" t
               WHERE EXISTS (SELECT 1 FROM "explain_pending" y WHERE y._rn = 1 AND y._action IN ('upsert', 'delete')
                   AND y."customer_id" = t."customer_id")) k) t
  WHERE s._rn = 1 AND s._action IN ('upsert', 'delete') AND t."customer_id" = s."customer_id" AND t.stored_rn__ = 1 AND s._source_pos <= t._source_pos;
  GET DIAGNOSTICS v_not_newer := ROW_COUNT;
  -- 5. A winner tied at the stored position, older in Kafka order than what wrote it: stale.
  IF v_not_newer > 0 THEN
    UPDATE "explain_pending" s SET _action = 'stale'
    FROM (SELECT r.*, COALESCE(m.kafka_timestamp, r.kafka_time__) AS stored_time__
          FROM (SELECT k.*, ROW_NUMBER() OVER (PARTITION BY k."customer_id"
                   ORDER BY k._source_pos DESC NULLS LAST, k._kafka_partition DESC, k._kafka_offset DESC) AS stored_rn__
                 FROM (SELECT t."customer_id", t._source_pos, t._kafka_partition, t._kafka_offset, CAST(NULL AS timestamp) AS kafka_time__,
                     true AS row__ FROM "explain_target" t
                       WHERE EXISTS (SELECT 1 FROM "explain_pending" y WHERE y._rn = 1 AND y._action IN ('upsert', 'delete')
                           AND y."customer_id" = t."customer_id" AND y._source_pos = t._source_pos)
                       UNION ALL SELECT t."customer_id", t._source_pos, t._kafka_partition, t._kafka_offset, t._kafka_timestamp, false FROM "explain_deleted" t
                       WHERE EXISTS (SELECT 1 FROM "explain_pending" y WHERE y._rn = 1 AND y._action IN ('upsert', 'delete')
                           AND y."customer_id" = t."customer_id" AND y._source_pos = t._source_pos)) k) r
          LEFT JOIN "cdc"."customer__stream" m ON r.row__ AND m.kafka_partition = r._kafka_partition AND m.kafka_offset = r._kafka_offset) t
    WHERE s._rn = 1 AND s._action IN ('upsert', 'delete') AND t."customer_id" = s."customer_id" AND t.stored_rn__ = 1 AND s._source_pos = t._source_pos
      AND (t._kafka_partition = s._kafka_partition AND t._kafka_offset > s._kafka_offset OR t._kafka_partition <> s._kafka_partition
          AND (t.stored_time__ > s._kafka_timestamp OR (COALESCE(t.stored_time__ = s._kafka_timestamp, true) AND t._kafka_partition > s._kafka_partition)));
  END IF;
  -- A winner without a source position was never stale; it is recorded at the position
  -- it ranked by, so replays of what it superseded stay stale.
  IF v_positionless > 0 THEN
    UPDATE "explain_pending" SET _source_pos = _rank_pos
    WHERE _rn = 1 AND _action IN ('upsert', 'delete') AND _source_pos IS NULL;
  END IF;
  -- Every record the stream retains, classified and ranked (an empty watermark).
  -- 10. Settings this procedure needs, for the CALL's transaction only (SET LOCAL).
  SET LOCAL enable_case_sensitive_identifier TO true;
  SET LOCAL cast_super_null_on_error TO on;
  -- 1. Single flight: a second call (or a backfill) waits here until the first commits,
  --    then sees its watermark, so no record is applied twice. Only the control table
  --    is locked: on Redshift every LOCK is exclusive, and the target stays readable.
  LOCK TABLE "explain_unread";
  v_started := CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp);
  -- A bounded run (record isolation by the caller) reads the first p_max_records pending
  -- records in (refresh_time, partition, offset) order: a prefix of every partition
  -- (0: none, which tells a failure of the procedure itself from one of a record).
  v_until_time := TIMESTAMP '9999-12-31 00:00:00';
  IF p_max_records < 1 THEN
    v_until_time := TIMESTAMP '1900-01-01 00:00:00';
  ELSIF p_max_records IS NOT NULL THEN
    SELECT x.refresh_time, x.kafka_partition, x.kafka_offset
    INTO v_until_time, v_until_partition, v_until_offset
    FROM (SELECT s.*, ROW_NUMBER() OVER (ORDER BY s.refresh_time, s.kafka_partition, s.kafka_offset) AS read_no
          FROM "cdc"."customer__stream" s
          LEFT JOIN "explain_unread" w ON w.kafka_partition = s.kafka_partition
          WHERE s.refresh_time >= (SELECT COALESCE(MAX(m.last_refresh_time), TIMESTAMP '1900-01-01 00:00:00') FROM "explain_unread" m)
            AND s.kafka_offset > COALESCE(w.last_offset, -1)) x
    WHERE x.read_no = p_max_records;
    v_until_time := COALESCE(v_until_time, TIMESTAMP '9999-12-31 00:00:00');
  END IF;
  -- 2./3. Records past the watermark (refresh_time only prunes), classified, typed and ranked
  --       per key, into the stage. The rules below read the stage and the keys' stored state, never a record's JSON again.
  INSERT INTO "explain_retained" (
    "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_time", "_refresh_time", "_op", "_action", "_reason",
    "_rn", "_source_ts", "_source_pos", "_rank_pos", "customer_id", "name", "mktsegment", "_unavailable", "_payload",
    "_raw_value", "_drift_img"
  )
  WITH batch AS (SELECT s.kafka_partition AS _kafka_partition, s.kafka_offset AS _kafka_offset,
      s.kafka_timestamp AS _kafka_timestamp, s.refresh_time AS _refresh_time,
      s.payload AS _payload, s.raw_value AS _raw_value,
      CASE WHEN IS_OBJECT(s.payload."schema") THEN s.payload."payload" ELSE s.payload END AS _env,
      CASE WHEN IS_OBJECT(s.key_payload."schema") THEN s.key_payload."payload" ELSE s.key_payload END AS _key_env
    FROM "cdc"."customer__stream" s
    LEFT JOIN "explain_unread" w ON w.kafka_partition = s.kafka_partition
    WHERE s.refresh_time >= (SELECT COALESCE(MAX(m.last_refresh_time), TIMESTAMP '1900-01-01 00:00:00') FROM "explain_unread" m)
      AND s.kafka_offset > COALESCE(w.last_offset, -1)
      AND (s.refresh_time < v_until_time
           OR (s.refresh_time = v_until_time
               AND (s.kafka_partition < v_until_partition
                    OR (s.kafka_partition = v_until_partition AND s.kafka_offset <= v_until_offset))))
    UNION ALL
    -- Quarantined records being replayed (at or below the watermark: already read once).
    SELECT r.kafka_partition, r.kafka_offset, r.kafka_timestamp, r.run_started_at, r.payload, r.raw_value,
           CASE WHEN IS_OBJECT(r.payload."schema") THEN r.payload."payload" ELSE r.payload END,
           CAST(NULL AS super)
    FROM "explain_no_quarantine" r
    WHERE r.table_name = 'customer' AND r.handled = 'replaying'),
  batch_1 AS (SELECT f.*, (CASE WHEN JSON_SIZE(f._env."op") <= 65535 THEN f._env."op" END) AS "_b_o0" FROM batch f),
  batch_2 AS (
    SELECT f.*, CASE WHEN IS_VARCHAR(f._b_o0) THEN f._b_o0::varchar(65535) WHEN f._b_o0 IS NOT NULL THEN JSON_SERIALIZE(f._b_o0) END AS "_x_o0"
    FROM batch_1 f),
  envelope AS (
    SELECT f._kafka_partition, f._kafka_offset, f._kafka_timestamp, f._refresh_time, f._payload, f._raw_value, f._env, f._key_env, f._x_o0 AS _op,
           CASE WHEN f._x_o0 = 'd' THEN f._env."before" ELSE f._env."after" END AS _img, f._env."source" AS _src
    FROM batch_2 f),
  envelope_1 AS (SELECT f.*, (CASE WHEN JSON_SIZE(f._src."file") <= 65535 THEN f._src."file" END) AS "_b_p0",
      (CASE WHEN JSON_SIZE(f._src."pos") <= 65535 THEN f._src."pos" END) AS "_b_p1",
      (CASE WHEN JSON_SIZE(f._src."row") <= 65535 THEN f._src."row" END) AS "_b_p2" FROM envelope f),
  envelope_2 AS (
    SELECT f.*, CASE WHEN IS_VARCHAR(f._b_p0) THEN f._b_p0::varchar(65535) WHEN f._b_p0 IS NOT NULL THEN JSON_SERIALIZE(f._b_p0) END AS "_x_p0",
           CASE WHEN IS_VARCHAR(f._b_p1) THEN f._b_p1::varchar(65535) WHEN f._b_p1 IS NOT NULL THEN JSON_SERIALIZE(f._b_p1) END AS "_x_p1",
           CASE WHEN IS_VARCHAR(f._b_p2) THEN f._b_p2::varchar(65535) WHEN f._b_p2 IS NOT NULL THEN JSON_SERIALIZE(f._b_p2) END AS "_x_p2"
    FROM envelope_1 f),
  fields AS (SELECT f._kafka_partition, f._kafka_offset, f._kafka_timestamp, f._refresh_time, f._payload, f._raw_value, f._env, f._img, f._op,
      f._src."ts_ms" AS _ts_ms,
      LPAD(REGEXP_SUBSTR(f._x_p0, '[0-9]*$'), 20, '0') || '.' || LPAD(f._x_p1, 20, '0') || '.' || LPAD(COALESCE(f._x_p2, ''), 20, '0') AS _source_pos,
      f._img."CUST_ID" AS _j_i0, CASE WHEN IS_OBJECT(f._key_env) THEN f._key_env."CUST_ID" ELSE f._key_env END AS _j_k0, f._img."NAME" AS _j_v0,
      f._img."MKTSEGMENT" AS _j_v1 FROM envelope_2 f),
  fields_1 AS (
    SELECT f.*, (CASE WHEN JSON_SIZE(f._j_i0) <= 65535 THEN f._j_i0 END) AS "_b_i0", (CASE WHEN JSON_SIZE(f._j_k0) <= 65535 THEN f._j_k0 END) AS "_b_k0",
           (CASE WHEN JSON_SIZE(f._j_v0) <= 65535 THEN f._j_v0 END) AS "_b_v0", (CASE WHEN JSON_SIZE(f._j_v1) <= 65535 THEN f._j_v1 END) AS "_b_v1"
    FROM fields f),
  fields_2 AS (
    SELECT f.*, CASE WHEN IS_VARCHAR(f._b_i0) THEN f._b_i0::varchar(65535) WHEN f._b_i0 IS NOT NULL THEN JSON_SERIALIZE(f._b_i0) END AS "_x_i0",
           CASE WHEN IS_VARCHAR(f._b_k0) THEN f._b_k0::varchar(65535) WHEN f._b_k0 IS NOT NULL THEN JSON_SERIALIZE(f._b_k0) END AS "_x_k0",
           CASE WHEN IS_VARCHAR(f._b_v0) THEN f._b_v0::varchar(65535) WHEN f._b_v0 IS NOT NULL THEN JSON_SERIALIZE(f._b_v0) END AS "_x_v0",
           CASE WHEN IS_VARCHAR(f._b_v1) THEN f._b_v1::varchar(65535) WHEN f._b_v1 IS NOT NULL THEN JSON_SERIALIZE(f._b_v1) END AS "_x_v1"
    FROM fields_1 f),
  fields_3 AS (SELECT f.*,
      COALESCE(f._x_v0 IN ('__debezium_unavailable_value', 'X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==', '["__debezium_unavailable_value"]'), false) AS "_u_v0",
      COALESCE(f._x_v1 IN ('__debezium_unavailable_value', 'X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==', '["__debezium_unavailable_value"]'), false) AS "_u_v1"
    FROM fields_2 f),
  typed AS (SELECT f.*, CAST(f._ts_ms AS bigint) AS _source_ts_ms, NOT (f._ts_ms IS NULL) AS _has_source_ts,
      COALESCE(CAST(CASE WHEN OCTET_LENGTH(f._x_i0) <= 64 THEN f._x_i0 END AS varchar(64)), CAST(CASE WHEN OCTET_LENGTH(f._x_k0) <= 64
          THEN f._x_k0 END AS varchar(64))) AS "customer_id",
      CASE WHEN f._u_v0 THEN NULL ELSE CAST(CASE WHEN OCTET_LENGTH(f._x_v0) <= 256 THEN f._x_v0 END AS varchar(256)) END AS "name",
      CASE WHEN f._u_v1 THEN NULL ELSE CAST(CASE WHEN OCTET_LENGTH(f._x_v1) <= 64 THEN f._x_v1 END AS varchar(64)) END AS "mktsegment",
      NULLIF('|' || CASE WHEN f._u_v0 THEN 'name|' ELSE '' END || CASE WHEN f._u_v1 THEN 'mktsegment|' ELSE '' END, '|') AS _unavailable,
      CASE WHEN f._op IN ('c', 'r', 'u') AND IS_OBJECT(f._img) AND NOT (f._j_i0 IS NOT NULL AND f._j_v0 IS NOT NULL AND f._j_v1 IS NOT NULL
          AND GET_NUMBER_ATTRIBUTES(f._img) = 3) THEN f._img END AS _drift_img
    FROM fields_3 f),
  checked AS (SELECT t.*,
      CASE
        WHEN t._raw_value IS NOT NULL THEN 1
        WHEN (t._env IS NULL) THEN 2
        WHEN NOT IS_OBJECT(t._env) THEN 3
        WHEN t._op IS NULL THEN 4
        WHEN t._op = 't' THEN 5
        WHEN t._op NOT IN ('c', 'r', 'u', 'd') THEN 6
        WHEN t._op <> 'd' AND ((t._img IS NULL) OR NOT IS_OBJECT(t._img)) THEN 7
        WHEN t."customer_id" IS NULL THEN 8
        WHEN t._has_source_ts AND (t._source_ts_ms IS NULL OR t._source_ts_ms NOT BETWEEN 0 AND 253402300799999) THEN 9
        WHEN t._op <> 'd' AND NOT (t._j_v0 IS NULL) AND t."name" IS NULL AND NOT t._u_v0 THEN 10
        WHEN t._op <> 'd' AND NOT (t._j_v1 IS NULL) AND t."mktsegment" IS NULL AND NOT t._u_v1 THEN 11
        WHEN t._op = 'd' THEN 12
        ELSE 0
      END AS _check_no FROM typed t),
  classified AS (SELECT t._kafka_partition, t._kafka_offset, t._kafka_timestamp, t._refresh_time, t._raw_value, t._op,
      CASE WHEN t._source_ts_ms BETWEEN 0 AND 253402300799999 THEN t._source_ts_ms END AS _source_ts_ms, t._source_pos,
      t._unavailable, t._drift_img, t."customer_id", t."name", t."mktsegment",
      CASE t._check_no WHEN 0 THEN 'upsert' WHEN 2 THEN 'tombstone' WHEN 5 THEN 'truncate' WHEN 12 THEN 'delete' ELSE 'quarantine' END AS _action,
      CASE t._check_no
        WHEN 1 THEN 'value is not valid JSON'
        WHEN 3 THEN 'value is not a JSON object'
        WHEN 4 THEN 'no op field: not a Debezium change event'
        WHEN 6 THEN 'unknown op "' || CASE WHEN OCTET_LENGTH(t._op) <= 64 THEN t._op ELSE SUBSTRING(t._op, 1, 16) END || '"'
        WHEN 7 THEN 'no row image: after is missing or not an object'
        WHEN 8 THEN 'primary key field CUST_ID is missing or not a varchar(64)'
        WHEN 9 THEN 'source time (ts_ms) is not milliseconds since the epoch between 1970 and 9999'
        WHEN 10 THEN 'field NAME does not convert to varchar(256)'
        WHEN 11 THEN 'field MKTSEGMENT does not convert to varchar(64)'
      END AS _reason,
      CASE WHEN t._check_no IN (1, 3, 4, 6, 7, 8, 9, 10, 11) OR t._unavailable IS NOT NULL THEN t._payload END AS _quarantine_payload,
      MAX(t._kafka_timestamp) OVER (PARTITION BY t._kafka_partition ORDER BY t._kafka_offset
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _kafka_time FROM checked t)
  SELECT c._kafka_partition, c._kafka_offset, c._kafka_timestamp, c._kafka_time, c._refresh_time,
         CASE WHEN OCTET_LENGTH(c._op) <= 64 THEN c._op ELSE SUBSTRING(c._op, 1, 16) END, c._action, c._reason,
         ROW_NUMBER() OVER (
           PARTITION BY CASE WHEN c._action IN ('upsert', 'delete') THEN 1 ELSE 0 END, c."customer_id"
           ORDER BY c._source_pos DESC NULLS LAST, c._kafka_time DESC NULLS LAST, c._kafka_partition DESC, c._kafka_offset DESC),
         (TIMESTAMP 'epoch' + (c._source_ts_ms / 1000) * INTERVAL '1 second' + (c._source_ts_ms % 1000) * INTERVAL '1 millisecond'),
         c._source_pos, c._source_pos, c."customer_id", c."name", c."mktsegment", c._unavailable, c._quarantine_payload,
         CASE WHEN c._action = 'quarantine' THEN c._raw_value END, c._drift_img
  FROM classified c;
  GET DIAGNOSTICS v_read := ROW_COUNT;
  -- The table's quarantined records, read as a replay reads them.
  -- 10. Settings this procedure needs, for the CALL's transaction only (SET LOCAL).
  SET LOCAL enable_case_sensitive_identifier TO true;
  SET LOCAL cast_super_null_on_error TO on;
  -- 1. Single flight: a second call (or a backfill) waits here until the first commits,
  --    then sees its watermark, so no record is applied twice. Only the control table
  --    is locked: on Redshift every LOCK is exclusive, and the target stays readable.
  LOCK TABLE "explain_sealed";
  v_started := CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp);
  -- A bounded run (record isolation by the caller) reads the first p_max_records pending
  -- records in (refresh_time, partition, offset) order: a prefix of every partition
  -- (0: none, which tells a failure of the procedure itself from one of a record).
  v_until_time := TIMESTAMP '9999-12-31 00:00:00';
  IF p_max_records < 1 THEN
    v_until_time := TIMESTAMP '1900-01-01 00:00:00';
  ELSIF p_max_records IS NOT NULL THEN
    SELECT x.refresh_time, x.kafka_partition, x.kafka_offset
    INTO v_until_time, v_until_partition, v_until_offset
    FROM (SELECT s.*, ROW_NUMBER() OVER (ORDER BY s.refresh_time, s.kafka_partition, s.kafka_offset) AS read_no
          FROM "cdc"."customer__stream" s
          LEFT JOIN "explain_sealed" w ON w.kafka_partition = s.kafka_partition
          WHERE s.refresh_time >= (SELECT COALESCE(MAX(m.last_refresh_time), TIMESTAMP '1900-01-01 00:00:00') FROM "explain_sealed" m)
            AND s.kafka_offset > COALESCE(w.last_offset, -1)) x
    WHERE x.read_no = p_max_records;
    v_until_time := COALESCE(v_until_time, TIMESTAMP '9999-12-31 00:00:00');
  END IF;
  -- 2./3. Records past the watermark (refresh_time only prunes), classified, typed and ranked
  --       per key, into the stage. The rules below read the stage and the keys' stored state, never a record's JSON again.
  INSERT INTO "explain_quarantined" (
    "_kafka_partition", "_kafka_offset", "_kafka_timestamp", "_kafka_time", "_refresh_time", "_op", "_action", "_reason",
    "_rn", "_source_ts", "_source_pos", "_rank_pos", "customer_id", "name", "mktsegment", "_unavailable", "_payload",
    "_raw_value", "_drift_img"
  )
  WITH batch AS (SELECT s.kafka_partition AS _kafka_partition, s.kafka_offset AS _kafka_offset,
      s.kafka_timestamp AS _kafka_timestamp, s.refresh_time AS _refresh_time,
      s.payload AS _payload, s.raw_value AS _raw_value,
      CASE WHEN IS_OBJECT(s.payload."schema") THEN s.payload."payload" ELSE s.payload END AS _env,
      CASE WHEN IS_OBJECT(s.key_payload."schema") THEN s.key_payload."payload" ELSE s.key_payload END AS _key_env
    FROM "cdc"."customer__stream" s
    LEFT JOIN "explain_sealed" w ON w.kafka_partition = s.kafka_partition
    WHERE s.refresh_time >= (SELECT COALESCE(MAX(m.last_refresh_time), TIMESTAMP '1900-01-01 00:00:00') FROM "explain_sealed" m)
      AND s.kafka_offset > COALESCE(w.last_offset, -1)
      AND (s.refresh_time < v_until_time
           OR (s.refresh_time = v_until_time
               AND (s.kafka_partition < v_until_partition
                    OR (s.kafka_partition = v_until_partition AND s.kafka_offset <= v_until_offset))))
    UNION ALL
    -- Quarantined records being replayed (at or below the watermark: already read once).
    SELECT r.kafka_partition, r.kafka_offset, r.kafka_timestamp, r.run_started_at, r.payload, r.raw_value,
           CASE WHEN IS_OBJECT(r.payload."schema") THEN r.payload."payload" ELSE r.payload END,
           CAST(NULL AS super)
    FROM "explain_replaying" r
    WHERE r.table_name = 'customer' AND r.handled = 'replaying'),
  batch_1 AS (SELECT f.*, (CASE WHEN JSON_SIZE(f._env."op") <= 65535 THEN f._env."op" END) AS "_b_o0" FROM batch f),
  batch_2 AS (
    SELECT f.*, CASE WHEN IS_VARCHAR(f._b_o0) THEN f._b_o0::varchar(65535) WHEN f._b_o0 IS NOT NULL THEN JSON_SERIALIZE(f._b_o0) END AS "_x_o0"
    FROM batch_1 f),
  envelope AS (
    SELECT f._kafka_partition, f._kafka_offset, f._kafka_timestamp, f._refresh_time, f._payload, f._raw_value, f._env, f._key_env, f._x_o0 AS _op,
           CASE WHEN f._x_o0 = 'd' THEN f._env."before" ELSE f._env."after" END AS _img, f._env."source" AS _src
    FROM batch_2 f),
  envelope_1 AS (SELECT f.*, (CASE WHEN JSON_SIZE(f._src."file") <= 65535 THEN f._src."file" END) AS "_b_p0",
      (CASE WHEN JSON_SIZE(f._src."pos") <= 65535 THEN f._src."pos" END) AS "_b_p1",
      (CASE WHEN JSON_SIZE(f._src."row") <= 65535 THEN f._src."row" END) AS "_b_p2" FROM envelope f),
  envelope_2 AS (
    SELECT f.*, CASE WHEN IS_VARCHAR(f._b_p0) THEN f._b_p0::varchar(65535) WHEN f._b_p0 IS NOT NULL THEN JSON_SERIALIZE(f._b_p0) END AS "_x_p0",
           CASE WHEN IS_VARCHAR(f._b_p1) THEN f._b_p1::varchar(65535) WHEN f._b_p1 IS NOT NULL THEN JSON_SERIALIZE(f._b_p1) END AS "_x_p1",
           CASE WHEN IS_VARCHAR(f._b_p2) THEN f._b_p2::varchar(65535) WHEN f._b_p2 IS NOT NULL THEN JSON_SERIALIZE(f._b_p2) END AS "_x_p2"
    FROM envelope_1 f),
  fields AS (SELECT f._kafka_partition, f._kafka_offset, f._kafka_timestamp, f._refresh_time, f._payload, f._raw_value, f._env, f._img, f._op,
      f._src."ts_ms" AS _ts_ms,
      LPAD(REGEXP_SUBSTR(f._x_p0, '[0-9]*$'), 20, '0') || '.' || LPAD(f._x_p1, 20, '0') || '.' || LPAD(COALESCE(f._x_p2, ''), 20, '0') AS _source_pos,
      f._img."CUST_ID" AS _j_i0, CASE WHEN IS_OBJECT(f._key_env) THEN f._key_env."CUST_ID" ELSE f._key_env END AS _j_k0, f._img."NAME" AS _j_v0,
      f._img."MKTSEGMENT" AS _j_v1 FROM envelope_2 f),
  fields_1 AS (
    SELECT f.*, (CASE WHEN JSON_SIZE(f._j_i0) <= 65535 THEN f._j_i0 END) AS "_b_i0", (CASE WHEN JSON_SIZE(f._j_k0) <= 65535 THEN f._j_k0 END) AS "_b_k0",
           (CASE WHEN JSON_SIZE(f._j_v0) <= 65535 THEN f._j_v0 END) AS "_b_v0", (CASE WHEN JSON_SIZE(f._j_v1) <= 65535 THEN f._j_v1 END) AS "_b_v1"
    FROM fields f),
  fields_2 AS (
    SELECT f.*, CASE WHEN IS_VARCHAR(f._b_i0) THEN f._b_i0::varchar(65535) WHEN f._b_i0 IS NOT NULL THEN JSON_SERIALIZE(f._b_i0) END AS "_x_i0",
           CASE WHEN IS_VARCHAR(f._b_k0) THEN f._b_k0::varchar(65535) WHEN f._b_k0 IS NOT NULL THEN JSON_SERIALIZE(f._b_k0) END AS "_x_k0",
           CASE WHEN IS_VARCHAR(f._b_v0) THEN f._b_v0::varchar(65535) WHEN f._b_v0 IS NOT NULL THEN JSON_SERIALIZE(f._b_v0) END AS "_x_v0",
           CASE WHEN IS_VARCHAR(f._b_v1) THEN f._b_v1::varchar(65535) WHEN f._b_v1 IS NOT NULL THEN JSON_SERIALIZE(f._b_v1) END AS "_x_v1"
    FROM fields_1 f),
  fields_3 AS (SELECT f.*,
      COALESCE(f._x_v0 IN ('__debezium_unavailable_value', 'X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==', '["__debezium_unavailable_value"]'), false) AS "_u_v0",
      COALESCE(f._x_v1 IN ('__debezium_unavailable_value', 'X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==', '["__debezium_unavailable_value"]'), false) AS "_u_v1"
    FROM fields_2 f),
  typed AS (SELECT f.*, CAST(f._ts_ms AS bigint) AS _source_ts_ms, NOT (f._ts_ms IS NULL) AS _has_source_ts,
      COALESCE(CAST(CASE WHEN OCTET_LENGTH(f._x_i0) <= 64 THEN f._x_i0 END AS varchar(64)), CAST(CASE WHEN OCTET_LENGTH(f._x_k0) <= 64
          THEN f._x_k0 END AS varchar(64))) AS "customer_id",
      CASE WHEN f._u_v0 THEN NULL ELSE CAST(CASE WHEN OCTET_LENGTH(f._x_v0) <= 256 THEN f._x_v0 END AS varchar(256)) END AS "name",
      CASE WHEN f._u_v1 THEN NULL ELSE CAST(CASE WHEN OCTET_LENGTH(f._x_v1) <= 64 THEN f._x_v1 END AS varchar(64)) END AS "mktsegment",
      NULLIF('|' || CASE WHEN f._u_v0 THEN 'name|' ELSE '' END || CASE WHEN f._u_v1 THEN 'mktsegment|' ELSE '' END, '|') AS _unavailable,
      CASE WHEN f._op IN ('c', 'r', 'u') AND IS_OBJECT(f._img) AND NOT (f._j_i0 IS NOT NULL AND f._j_v0 IS NOT NULL AND f._j_v1 IS NOT NULL
          AND GET_NUMBER_ATTRIBUTES(f._img) = 3) THEN f._img END AS _drift_img
    FROM fields_3 f),
  checked AS (SELECT t.*,
      CASE
        WHEN t._raw_value IS NOT NULL THEN 1
        WHEN (t._env IS NULL) THEN 2
        WHEN NOT IS_OBJECT(t._env) THEN 3
        WHEN t._op IS NULL THEN 4
        WHEN t._op = 't' THEN 5
        WHEN t._op NOT IN ('c', 'r', 'u', 'd') THEN 6
        WHEN t._op <> 'd' AND ((t._img IS NULL) OR NOT IS_OBJECT(t._img)) THEN 7
        WHEN t."customer_id" IS NULL THEN 8
        WHEN t._has_source_ts AND (t._source_ts_ms IS NULL OR t._source_ts_ms NOT BETWEEN 0 AND 253402300799999) THEN 9
        WHEN t._op <> 'd' AND NOT (t._j_v0 IS NULL) AND t."name" IS NULL AND NOT t._u_v0 THEN 10
        WHEN t._op <> 'd' AND NOT (t._j_v1 IS NULL) AND t."mktsegment" IS NULL AND NOT t._u_v1 THEN 11
        WHEN t._op = 'd' THEN 12
        ELSE 0
      END AS _check_no FROM typed t),
  classified AS (SELECT t._kafka_partition, t._kafka_offset, t._kafka_timestamp, t._refresh_time, t._raw_value, t._op,
      CASE WHEN t._source_ts_ms BETWEEN 0 AND 253402300799999 THEN t._source_ts_ms END AS _source_ts_ms, t._source_pos,
      t._unavailable, t._drift_img, t."customer_id", t."name", t."mktsegment",
      CASE t._check_no WHEN 0 THEN 'upsert' WHEN 2 THEN 'tombstone' WHEN 5 THEN 'truncate' WHEN 12 THEN 'delete' ELSE 'quarantine' END AS _action,
      CASE t._check_no
        WHEN 1 THEN 'value is not valid JSON'
        WHEN 3 THEN 'value is not a JSON object'
        WHEN 4 THEN 'no op field: not a Debezium change event'
        WHEN 6 THEN 'unknown op "' || CASE WHEN OCTET_LENGTH(t._op) <= 64 THEN t._op ELSE SUBSTRING(t._op, 1, 16) END || '"'
        WHEN 7 THEN 'no row image: after is missing or not an object'
        WHEN 8 THEN 'primary key field CUST_ID is missing or not a varchar(64)'
        WHEN 9 THEN 'source time (ts_ms) is not milliseconds since the epoch between 1970 and 9999'
        WHEN 10 THEN 'field NAME does not convert to varchar(256)'
        WHEN 11 THEN 'field MKTSEGMENT does not convert to varchar(64)'
      END AS _reason,
      CASE WHEN t._check_no IN (1, 3, 4, 6, 7, 8, 9, 10, 11) OR t._unavailable IS NOT NULL THEN t._payload END AS _quarantine_payload,
      MAX(t._kafka_timestamp) OVER (PARTITION BY t._kafka_partition ORDER BY t._kafka_offset
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _kafka_time FROM checked t)
  SELECT c._kafka_partition, c._kafka_offset, c._kafka_timestamp, c._kafka_time, c._refresh_time,
         CASE WHEN OCTET_LENGTH(c._op) <= 64 THEN c._op ELSE SUBSTRING(c._op, 1, 16) END, c._action, c._reason,
         ROW_NUMBER() OVER (
           PARTITION BY CASE WHEN c._action IN ('upsert', 'delete') THEN 1 ELSE 0 END, c."customer_id"
           ORDER BY c._source_pos DESC NULLS LAST, c._kafka_time DESC NULLS LAST, c._kafka_partition DESC, c._kafka_offset DESC),
         (TIMESTAMP 'epoch' + (c._source_ts_ms / 1000) * INTERVAL '1 second' + (c._source_ts_ms % 1000) * INTERVAL '1 millisecond'),
         c._source_pos, c._source_pos, c."customer_id", c."name", c."mktsegment", c._unavailable, c._quarantine_payload,
         CASE WHEN c._action = 'quarantine' THEN c._raw_value END, c._drift_img
  FROM classified c;
  GET DIAGNOSTICS v_read := ROW_COUNT;
END;
$$ LANGUAGE plpgsql
SET timezone TO 'UTC';

CALL "cdc"."explain_0"(CAST(NULL AS bigint));

SELECT 'explain_pending' AS stage, s._kafka_partition, s._kafka_offset, s._kafka_timestamp, s._refresh_time, s._op, s._action, s._reason, s._rn, s._source_pos, s._rank_pos, s._unavailable
FROM "explain_pending" s
WHERE s."customer_id" = CAST('C001' AS varchar(64))
UNION ALL
SELECT 'explain_retained' AS stage, s._kafka_partition, s._kafka_offset, s._kafka_timestamp, s._refresh_time, s._op, s._action, s._reason, s._rn, s._source_pos, s._rank_pos, s._unavailable
FROM "explain_retained" s
WHERE s."customer_id" = CAST('C001' AS varchar(64))
UNION ALL
SELECT 'explain_quarantined' AS stage, s._kafka_partition, s._kafka_offset, s._kafka_timestamp, s._refresh_time, s._op, s._action, s._reason, s._rn, s._source_pos, s._rank_pos, s._unavailable
FROM "explain_quarantined" s
WHERE s."customer_id" = CAST('C001' AS varchar(64))
ORDER BY _rank_pos DESC NULLS LAST, _kafka_timestamp DESC NULLS LAST, _kafka_partition DESC, _kafka_offset DESC;

SELECT t."customer_id", t."name", t."mktsegment", t._source_ts, t._source_pos, t._kafka_partition, t._kafka_offset, t._synced_at
FROM "cdc"."customer" t
WHERE t."customer_id" = CAST('C001' AS varchar(64));

SELECT t."customer_id", t._source_ts, t._source_pos, t._kafka_partition, t._kafka_offset, t._kafka_timestamp, t._deleted_at
FROM "cdc"."customer__deleted" t
WHERE t."customer_id" = CAST('C001' AS varchar(64));

SELECT q.kafka_partition, q.kafka_offset, q.kafka_timestamp, q.run_started_at, q.reason, q.handled
FROM "cdc"."customer__quarantine" q
JOIN "explain_quarantined" s ON s._kafka_partition = q.kafka_partition AND s._kafka_offset = q.kafka_offset
  AND s._refresh_time = q.run_started_at
WHERE q.table_name = 'customer' AND s."customer_id" = CAST('C001' AS varchar(64))
ORDER BY q.run_started_at DESC, q.kafka_partition DESC, q.kafka_offset DESC;
