DROP TABLE IF EXISTS "cdc"."orders__backfill";

-- Backfill stage: the Parquet columns in order (COPY maps them by position).
CREATE TABLE "cdc"."orders__backfill" (
  "order_id" bigint,
  "customer_id" varchar(64),
  "status" varchar(16),
  "total" decimal(12,2),
  "placed_at" timestamp,
  "_source_ts" timestamp,
  "_source_pos" varchar(64),
  "_kafka_partition" bigint,
  "_kafka_offset" bigint,
  "_delete" boolean
)
BACKUP NO
DISTSTYLE KEY DISTKEY ("order_id")
COMPOUND SORTKEY ("order_id");

BEGIN;

-- Same lock as incremental_sync takes first, the watermark: a sync waits. The
-- target is not locked (on Redshift every LOCK is exclusive: readers would wait
-- for the whole load); only the backfill and the procedure write it.
LOCK TABLE "cdc"."orders__watermark", "cdc"."orders__backfill";

DELETE FROM "cdc"."orders__backfill";

-- load the stage here (COPY)

SELECT COUNT(*) FROM "cdc"."orders__backfill";

-- Rows the stream wrote at or after the snapshot row's source time stay, and so do
-- rows of unknown age (the stream carries every later change of their key).
DELETE FROM "cdc"."orders__backfill"
USING "cdc"."orders" t
WHERE t."order_id" = "cdc"."orders__backfill"."order_id"
  AND CASE WHEN "cdc"."orders__backfill"._source_pos IS NOT NULL AND t._source_pos IS NOT NULL
       THEN "cdc"."orders__backfill"._source_pos <= t._source_pos
       ELSE COALESCE(t._source_ts >= "cdc"."orders__backfill"._source_ts, true) END;

DELETE FROM "cdc"."orders"
USING "cdc"."orders__backfill" _s
WHERE NOT _s._delete
  AND "cdc"."orders"."order_id" = _s."order_id";

INSERT INTO "cdc"."orders" ("order_id", "customer_id", "status", "total", "placed_at", _source_ts, _source_pos, _kafka_partition, _kafka_offset, _synced_at, _deleted)
SELECT s."order_id", s."customer_id", s."status", s."total", s."placed_at", s._source_ts, s._source_pos, s._kafka_partition, s._kafka_offset, CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp), false
FROM "cdc"."orders__backfill" s
WHERE NOT s._delete;

-- Soft mode: a delete in the snapshot marks the row, keeping its values.
UPDATE "cdc"."orders" t SET _deleted = true,
       "customer_id" = COALESCE(s."customer_id", t."customer_id"),
       "status" = COALESCE(s."status", t."status"),
       "total" = COALESCE(s."total", t."total"),
       "placed_at" = COALESCE(s."placed_at", t."placed_at"),
       _source_ts = s._source_ts, _source_pos = s._source_pos,
       _kafka_partition = s._kafka_partition, _kafka_offset = s._kafka_offset, _synced_at = CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp)
FROM "cdc"."orders__backfill" s
WHERE s._delete
  AND t."order_id" = s."order_id";

INSERT INTO "cdc"."orders" ("order_id", "customer_id", "status", "total", "placed_at", _source_ts, _source_pos, _kafka_partition, _kafka_offset, _synced_at, _deleted)
SELECT s."order_id", s."customer_id", s."status", s."total", s."placed_at", s._source_ts, s._source_pos, s._kafka_partition, s._kafka_offset, CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp), true
FROM "cdc"."orders__backfill" s
WHERE s._delete
  AND NOT EXISTS (SELECT 1 FROM "cdc"."orders" t WHERE t."order_id" = s."order_id");

DELETE FROM "cdc"."orders__backfill";

COMMIT;

-- reconcile
SELECT b.bucket, COUNT(*) AS rows, SUM(b.checksum) AS checksum
FROM (SELECT MOD(STRTOL(SUBSTRING(MD5(CAST(t."order_id" AS varchar(64))), 1, 8), 16), 64) AS bucket, STRTOL(SUBSTRING(MD5(MD5(COALESCE(MD5(CAST(t."order_id" AS varchar(64))), 'N') || COALESCE(MD5(CAST(t."customer_id" AS varchar(65535))), 'N') || COALESCE(MD5(CAST(t."status" AS varchar(65535))), 'N') || COALESCE(MD5(CAST(t."total" AS varchar(64))), 'N') || COALESCE(MD5(TO_CHAR(t."placed_at", 'YYYY-MM-DD HH24:MI:SS.US')), 'N'))), 1, 8), 16) AS checksum
      FROM "cdc"."orders" t
      WHERE NOT t._deleted) b
GROUP BY b.bucket
ORDER BY b.bucket;

SELECT CAST(t."order_id" AS varchar(64)) AS key_text, MD5(COALESCE(MD5(CAST(t."order_id" AS varchar(64))), 'N') || COALESCE(MD5(CAST(t."customer_id" AS varchar(65535))), 'N') || COALESCE(MD5(CAST(t."status" AS varchar(65535))), 'N') || COALESCE(MD5(CAST(t."total" AS varchar(64))), 'N') || COALESCE(MD5(TO_CHAR(t."placed_at", 'YYYY-MM-DD HH24:MI:SS.US')), 'N')) AS checksum, t._source_pos, t._source_ts AS held_time, t._deleted AS deleted
FROM "cdc"."orders" t
WHERE MOD(STRTOL(SUBSTRING(MD5(CAST(t."order_id" AS varchar(64))), 1, 8), 16), 64) IN (3, 5);
