"""AWS edges: the Lambda handler, the Redshift Data API client, S3, packaging, retries."""
