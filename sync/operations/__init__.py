"""What the commands do against a warehouse: deploy/sync/status, isolation, quarantine, recovery, reconcile, backfill."""
