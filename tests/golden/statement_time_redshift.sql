SELECT c.table_name, COUNT(DISTINCT c.transaction_id) AS calls,
       COALESCE(SUM(q.execution_time), 0) / 1000000.0 AS execution_seconds,
       COALESCE(SUM(q.queue_time), 0) / 1000000.0 AS queue_seconds
FROM (SELECT query_id, transaction_id,
             CASE
               WHEN LEFT(query_text, 39) = 'CALL "cdc"."incremental_sync_customer"(' THEN 'customer'
               WHEN LEFT(query_text, 37) = 'CALL "cdc"."incremental_sync_orders"(' THEN 'orders'
             END AS table_name
      FROM SYS_QUERY_HISTORY
      WHERE query_text LIKE 'CALL %' AND start_time >= DATEADD(hour, -24, GETDATE())) c
LEFT JOIN SYS_QUERY_HISTORY q ON q.transaction_id = c.transaction_id AND q.query_id <> c.query_id
WHERE c.table_name IS NOT NULL
GROUP BY c.table_name
ORDER BY c.table_name;
