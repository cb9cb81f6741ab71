"""The embedded warehouse: pgserver, the local stream (ingest) and the local Data API."""
