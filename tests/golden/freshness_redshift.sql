CREATE MATERIALIZED VIEW "cdc"."sync_heartbeat__stream"
AUTO REFRESH YES
AS
SELECT kafka_partition,
       kafka_offset,
       kafka_timestamp_type,
       kafka_timestamp,
       kafka_key,
       kafka_headers,
       refresh_time,
       JSON_PARSE(CASE WHEN CAN_JSON_PARSE(kafka_value) THEN kafka_value END) AS payload,
       CASE WHEN kafka_value IS NOT NULL AND NOT CAN_JSON_PARSE(kafka_value) THEN kafka_value END AS raw_value,
       JSON_PARSE(CASE WHEN CAN_JSON_PARSE(kafka_key) THEN kafka_key END) AS key_payload
FROM "msk_cdc"."__debezium-heartbeat.salesdb";

SELECT TRIM(mv_name), DATEDIFF(microsecond, MAX(end_time), CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp)) / 1000000.0
FROM SYS_MV_REFRESH_HISTORY
WHERE TRIM(schema_name) = 'cdc' AND TRIM(mv_name) IN ('sync_heartbeat__stream', 'customer__stream')
  AND (status LIKE 'Refresh successfully%' OR status LIKE 'MV was already updated%')
GROUP BY TRIM(mv_name);

WITH c AS (SELECT CAST(TO_TIMESTAMP(TIMEOFDAY(), 'Dy Mon DD HH24:MI:SS.US YYYY') AS timestamp) AS now_at),
     hb AS (SELECT MAX(kafka_timestamp) AS heartbeat_at FROM "cdc"."sync_heartbeat__stream")
SELECT 'customer' AS table_name,
       DATEDIFF(microsecond, hb.heartbeat_at, c.now_at) / 1000000.0 AS heartbeat_age,
       e.last_event_at, DATEDIFF(microsecond, e.last_event_at, c.now_at) / 1000000.0 AS event_age,
       (SELECT MAX(finished_at) FROM "cdc"."sync_run_log"
        WHERE table_name = 'customer' AND status = 'ok' AND upserted + deleted > 0) AS last_applied_at,
       p.pending, COALESCE(DATEDIFF(microsecond, p.oldest, c.now_at) / 1000000.0, 0) AS waited
FROM c CROSS JOIN hb
CROSS JOIN (SELECT MAX(kafka_timestamp) AS last_event_at FROM "cdc"."customer__stream") e
CROSS JOIN (SELECT COUNT(*) AS pending, MIN(s.kafka_timestamp) AS oldest FROM "cdc"."customer__stream" s LEFT JOIN "cdc"."customer__watermark" w ON w.kafka_partition = s.kafka_partition WHERE s.refresh_time >= (SELECT COALESCE(MAX(m.last_refresh_time), TIMESTAMP '1900-01-01 00:00:00') FROM "cdc"."customer__watermark" m)
  AND s.kafka_offset > COALESCE(w.last_offset, -1)) p;
