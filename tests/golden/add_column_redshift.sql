BEGIN;

-- Running upgrade 474a94aea2c7 -> <revision>

SET enable_case_sensitive_identifier TO true;

SET cast_super_null_on_error TO on;

ALTER TABLE "cdc"."customer" ADD COLUMN "discount_pct" decimal(5,2);

ALTER TABLE "cdc"."customer__stage" ADD COLUMN "discount_pct" decimal(5,2);

-- customer.discount_pct for the rows already stored: the value of the newest record of the
-- key at or before the row's position that carries one (the TOAST placeholder means unchanged);
-- NULL when no retained record does or the value does not convert.
UPDATE "cdc"."customer" t SET "discount_pct" = v.value
FROM (
  SELECT w."customer_id", c.value,
         ROW_NUMBER() OVER (PARTITION BY w."customer_id"
           ORDER BY c.source_pos DESC NULLS LAST, c.kafka_time DESC NULLS LAST, c._kafka_partition DESC, c._kafka_offset DESC) AS rn
  FROM (
    SELECT f.kafka_partition AS _kafka_partition, f.kafka_offset AS _kafka_offset, f.kafka_timestamp AS _kafka_timestamp,
           f.kafka_time, f.source_pos, f.settled,
           CAST(CASE WHEN OCTET_LENGTH(f._x_c0) <= 64 THEN f._x_c0 END AS varchar(64)) AS "customer_id",
           CAST(f."j__discount_pct" AS decimal(5,2)) AS value
    FROM (
      SELECT f.*,
             CASE WHEN IS_VARCHAR(f._b_c0) THEN f._b_c0::varchar(65535) WHEN f._b_c0 IS NOT NULL THEN JSON_SERIALIZE(f._b_c0) END AS "_x_c0"
      FROM (
        SELECT f.*,
               (CASE WHEN JSON_SIZE(f."j__customer_id") <= 65535 THEN f."j__customer_id" END) AS "_b_c0"
        FROM (
          SELECT f.kafka_partition, f.kafka_offset, f.kafka_timestamp, f.kafka_time, f.settled,
                 LPAD(REGEXP_SUBSTR(CASE WHEN IS_VARCHAR((CASE WHEN JSON_SIZE(f.src."file") <= 65535 THEN f.src."file" END)) THEN (CASE WHEN JSON_SIZE(f.src."file") <= 65535 THEN f.src."file" END)::varchar(65535) WHEN (CASE WHEN JSON_SIZE(f.src."file") <= 65535 THEN f.src."file" END) IS NOT NULL THEN JSON_SERIALIZE((CASE WHEN JSON_SIZE(f.src."file") <= 65535 THEN f.src."file" END)) END, '[0-9]*$'), 20, '0') || '.' || LPAD(CASE WHEN IS_VARCHAR((CASE WHEN JSON_SIZE(f.src."pos") <= 65535 THEN f.src."pos" END)) THEN (CASE WHEN JSON_SIZE(f.src."pos") <= 65535 THEN f.src."pos" END)::varchar(65535) WHEN (CASE WHEN JSON_SIZE(f.src."pos") <= 65535 THEN f.src."pos" END) IS NOT NULL THEN JSON_SERIALIZE((CASE WHEN JSON_SIZE(f.src."pos") <= 65535 THEN f.src."pos" END)) END, 20, '0') || '.' || LPAD(COALESCE(CASE WHEN IS_VARCHAR((CASE WHEN JSON_SIZE(f.src."row") <= 65535 THEN f.src."row" END)) THEN (CASE WHEN JSON_SIZE(f.src."row") <= 65535 THEN f.src."row" END)::varchar(65535) WHEN (CASE WHEN JSON_SIZE(f.src."row") <= 65535 THEN f.src."row" END) IS NOT NULL THEN JSON_SERIALIZE((CASE WHEN JSON_SIZE(f.src."row") <= 65535 THEN f.src."row" END)) END, ''), 20, '0') AS source_pos,
                 f.img."CUST_ID" AS "j__customer_id",
                 f.img."DISCOUNT_PCT" AS "j__discount_pct"
          FROM (
            SELECT f.kafka_partition, f.kafka_offset, f.kafka_timestamp, f.kafka_time, f.settled,
                   CASE WHEN CASE WHEN IS_VARCHAR((CASE WHEN JSON_SIZE(f.env."op") <= 65535 THEN f.env."op" END)) THEN (CASE WHEN JSON_SIZE(f.env."op") <= 65535 THEN f.env."op" END)::varchar(65535) WHEN (CASE WHEN JSON_SIZE(f.env."op") <= 65535 THEN f.env."op" END) IS NOT NULL THEN JSON_SERIALIZE((CASE WHEN JSON_SIZE(f.env."op") <= 65535 THEN f.env."op" END)) END = 'd' THEN f.env."before" ELSE f.env."after" END AS img,
                   f.env."source" AS src
            FROM (
              SELECT s.kafka_partition, s.kafka_offset, s.kafka_timestamp,
                     CASE WHEN IS_OBJECT(s.payload."schema") THEN s.payload."payload" ELSE s.payload END AS env,
                     MAX(s.kafka_timestamp) OVER (PARTITION BY s.kafka_partition ORDER BY s.kafka_offset
                       ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS kafka_time,
                     CASE WHEN s.kafka_offset <= w.last_offset AND q.kafka_offset IS NULL THEN 1 ELSE 0 END AS settled
              FROM "cdc"."customer__stream" s
              LEFT JOIN "cdc"."customer__watermark" w ON w.kafka_partition = s.kafka_partition
              LEFT JOIN (SELECT DISTINCT kafka_partition, kafka_offset FROM "cdc"."sync_quarantine" WHERE table_name = 'customer') q
                ON q.kafka_partition = s.kafka_partition AND q.kafka_offset = s.kafka_offset
            ) f
          ) f
        ) f
      ) f
    ) f
  ) c
  JOIN "cdc"."customer" w ON w."customer_id" = c."customer_id"
  LEFT JOIN "cdc"."customer__stream" m ON m.kafka_partition = w._kafka_partition AND m.kafka_offset = w._kafka_offset
  WHERE (c.source_pos < w._source_pos
         OR (c.source_pos = w._source_pos AND c.settled = 1)
         OR ((c.source_pos = w._source_pos OR c.source_pos IS NULL OR w._source_pos IS NULL)
             AND (c._kafka_partition = w._kafka_partition AND c._kafka_offset = w._kafka_offset
                  OR (w._kafka_partition = c._kafka_partition AND w._kafka_offset > c._kafka_offset
                   OR w._kafka_partition <> c._kafka_partition
                      AND (m.kafka_timestamp > c._kafka_timestamp
                           OR (COALESCE(m.kafka_timestamp = c._kafka_timestamp, true) AND w._kafka_partition > c._kafka_partition))))))
) v
WHERE t."customer_id" = v."customer_id" AND v.rn = 1
  AND v.value IS NOT NULL;

-- CREATE OR REPLACE PROCEDURE "cdc"."incremental_sync_customer"(p_max_records bigint) of the generator

-- CREATE OR REPLACE PROCEDURE "cdc"."incremental_sync_customer"() of the generator

-- CREATE OR REPLACE PROCEDURE "cdc"."isolate_record_customer"(p_reason varchar(65535)) of the generator

DELETE FROM "cdc"."customer__drift" WHERE table_name = 'customer';

UPDATE alembic_version SET version_num='<revision>' WHERE alembic_version.version_num = '474a94aea2c7';

COMMIT;

