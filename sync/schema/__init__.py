"""Warehouse revisions: alembic operations, the revision plan and the deployed state."""
