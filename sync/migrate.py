"""What revision files import (`from sync.migrate import Revision`), including those written
by earlier versions; the operations live in sync/schema/migrate.py."""

from sync.schema.migrate import Revision

__all__ = ["Revision"]
