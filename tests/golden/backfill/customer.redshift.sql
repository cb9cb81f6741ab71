DROP TABLE IF EXISTS "cdc"."customer__backfill";

-- Backfill stage: the Parquet columns in order (COPY maps them by position).
CREATE TABLE "cdc"."customer__backfill" (
  "customer_id" varchar(64),
  "name" varchar(256),
  "mktsegment" varchar(64),
  "_source_ts" timestamp,
  "_source_pos" varchar(64),
  "_kafka_partition" bigint,
  "_kafka_offset" bigint,
  "_delete" boolean
)
BACKUP NO
DISTSTYLE KEY DISTKEY ("customer_id")
COMPOUND SORTKEY ("customer_id");

BEGIN;

-- Same lock as incremental_sync takes first, the watermark: a sync waits. The
-- target is not locked (on Redshift every LOCK is exclusive: readers would wait
-- for the whole load); only the backfill and the procedure write it.
LOCK TABLE "cdc"."customer__watermark", "cdc"."customer__deleted", "cdc"."customer__backfill";

DELETE FROM "cdc"."customer__backfill";

-- load the stage here (COPY)

SELECT COUNT(*) FROM "cdc"."customer__backfill";

-- Rows the stream wrote at or after the snapshot row's source time stay, and so do
-- rows of unknown age (the stream carries every later change of their key).
DELETE FROM "cdc"."customer__backfill"
USING "cdc"."customer" t
WHERE t."customer_id" = "cdc"."customer__backfill"."customer_id"
  AND CASE WHEN "cdc"."customer__backfill"._source_pos IS NOT NULL AND t._source_pos IS NOT NULL
       THEN "cdc"."customer__backfill"._source_pos <= t._source_pos
       ELSE COALESCE(t._source_ts >= "cdc"."customer__backfill"._source_ts, true) END;

-- Keys the stream deleted after the snapshot row stay deleted. A tombstone-only
-- delete has no source time: its Kafka timestamp, set when the delete was
-- produced, is an upper bound of its commit time.
DELETE FROM "cdc"."customer__backfill"
USING "cdc"."customer__deleted" t
WHERE t."customer_id" = "cdc"."customer__backfill"."customer_id"
  AND CASE WHEN "cdc"."customer__backfill"._source_pos IS NOT NULL AND t._source_pos IS NOT NULL
       THEN "cdc"."customer__backfill"._source_pos <= t._source_pos
       ELSE COALESCE(COALESCE(t._source_ts, t._kafka_timestamp) >= "cdc"."customer__backfill"._source_ts, true) END;

DELETE FROM "cdc"."customer"
USING "cdc"."customer__backfill" _s
WHERE "cdc"."customer"."customer_id" = _s."customer_id";

DELETE FROM "cdc"."customer__deleted"
USING "cdc"."customer__backfill" _s
WHERE "cdc"."customer__deleted"."customer_id" = _s."customer_id";

-- Deletes in the snapshot are remembered like the stream's.
INSERT INTO "cdc"."customer__deleted" ("customer_id", _source_ts, _source_pos, _kafka_partition, _kafka_offset, _deleted_at)
SELECT s."customer_id", s._source_ts, s._source_pos, s._kafka_partition, s._kafka_offset, CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp)
FROM "cdc"."customer__backfill" s
WHERE s._delete;

INSERT INTO "cdc"."customer" ("customer_id", "name", "mktsegment", _source_ts, _source_pos, _kafka_partition, _kafka_offset, _synced_at)
SELECT s."customer_id", s."name", s."mktsegment", s._source_ts, s._source_pos, s._kafka_partition, s._kafka_offset, CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp)
FROM "cdc"."customer__backfill" s
WHERE NOT s._delete;

DELETE FROM "cdc"."customer__backfill";

COMMIT;

-- reconcile
SELECT b.bucket, COUNT(*) AS rows, SUM(b.checksum) AS checksum
FROM (SELECT MOD(STRTOL(SUBSTRING(MD5(CAST(t."customer_id" AS varchar(65535))), 1, 8), 16), 64) AS bucket, STRTOL(SUBSTRING(MD5(MD5(COALESCE(MD5(CAST(t."customer_id" AS varchar(65535))), 'N') || COALESCE(MD5(CAST(t."name" AS varchar(65535))), 'N') || COALESCE(MD5(CAST(t."mktsegment" AS varchar(65535))), 'N'))), 1, 8), 16) AS checksum
      FROM "cdc"."customer" t) b
GROUP BY b.bucket
ORDER BY b.bucket;

SELECT CAST(t."customer_id" AS varchar(65535)) AS key_text, MD5(COALESCE(MD5(CAST(t."customer_id" AS varchar(65535))), 'N') || COALESCE(MD5(CAST(t."name" AS varchar(65535))), 'N') || COALESCE(MD5(CAST(t."mktsegment" AS varchar(65535))), 'N')) AS checksum, t._source_pos, t._source_ts AS held_time, FALSE AS deleted
FROM "cdc"."customer" t
WHERE MOD(STRTOL(SUBSTRING(MD5(CAST(t."customer_id" AS varchar(65535))), 1, 8), 16), 64) IN (3, 5)
UNION ALL
SELECT CAST(t."customer_id" AS varchar(65535)), NULL, t._source_pos, COALESCE(t._source_ts, t._kafka_timestamp), TRUE
FROM "cdc"."customer__deleted" t
WHERE MOD(STRTOL(SUBSTRING(MD5(CAST(t."customer_id" AS varchar(65535))), 1, 8), 16), 64) IN (3, 5);
