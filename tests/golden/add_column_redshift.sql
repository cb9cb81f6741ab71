BEGIN;

-- Running upgrade 474a94aea2c7 -> <revision>

SET enable_case_sensitive_identifier TO true;

SET cast_super_null_on_error TO on;

ALTER TABLE "cdc"."customer" ADD COLUMN "discount_pct" decimal(5,2);

ALTER TABLE "cdc"."customer__stage" ADD COLUMN "discount_pct" decimal(5,2);

-- customer.discount_pct for the rows already stored: the value the record that wrote
-- each row carried (NULL when that record is no longer retained or the value does not convert).
UPDATE "cdc"."customer" t SET "discount_pct" = v.value
FROM (
  SELECT f.kafka_partition, f.kafka_offset,
         CAST(f."j__discount_pct" AS decimal(5,2)) AS value
  FROM (
    SELECT f.kafka_partition, f.kafka_offset,
           f.img."DISCOUNT_PCT" AS "j__discount_pct"
    FROM (
      SELECT f.kafka_partition, f.kafka_offset,
             CASE WHEN CASE WHEN IS_VARCHAR((CASE WHEN JSON_SIZE(f.env."op") <= 65535 THEN f.env."op" END)) THEN (CASE WHEN JSON_SIZE(f.env."op") <= 65535 THEN f.env."op" END)::varchar(65535) WHEN (CASE WHEN JSON_SIZE(f.env."op") <= 65535 THEN f.env."op" END) IS NOT NULL THEN JSON_SERIALIZE((CASE WHEN JSON_SIZE(f.env."op") <= 65535 THEN f.env."op" END)) END = 'd' THEN f.env."before" ELSE f.env."after" END AS img
      FROM (
        SELECT s.kafka_partition, s.kafka_offset,
               CASE WHEN IS_OBJECT(s.payload."schema") THEN s.payload."payload" ELSE s.payload END AS env
        FROM "cdc"."customer__stream" s
        JOIN "cdc"."customer" stored ON stored._kafka_partition = s.kafka_partition AND stored._kafka_offset = s.kafka_offset
      ) f
    ) f
  ) f
) v
WHERE t._kafka_partition = v.kafka_partition AND t._kafka_offset = v.kafka_offset
  AND v.value IS NOT NULL;

-- CREATE OR REPLACE PROCEDURE "cdc"."incremental_sync_customer"(p_max_records bigint) of the generator

-- CREATE OR REPLACE PROCEDURE "cdc"."incremental_sync_customer"() of the generator

-- CREATE OR REPLACE PROCEDURE "cdc"."isolate_record_customer"(p_reason varchar(65535)) of the generator

DELETE FROM "cdc"."customer__drift" WHERE table_name = 'customer';

UPDATE alembic_version SET version_num='<revision>' WHERE alembic_version.version_num = '474a94aea2c7';

COMMIT;

