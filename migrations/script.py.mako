"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
% if summary:

${summary}
% endif
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

% if state:
from sync.schema.migrate import Revision
% else:
import sqlalchemy as sa
from alembic import op
% endif
${imports if imports else ""}
# revision identifiers, used by Alembic.
revision: str = ${repr(up_revision)}
down_revision: Union[str, Sequence[str], None] = ${repr(down_revision)}
branch_labels: Union[str, Sequence[str], None] = ${repr(branch_labels)}
depends_on: Union[str, Sequence[str], None] = ${repr(depends_on)}
% if state:

# The pipeline this revision brings the warehouse to, with fingerprints of the SQL the
# generator rendered from it. The generator renders every statement below from this
# state when the revision runs; `redshift-sync revision` compares the next pipeline file
# (and the generator installed then) with it.
STATE = ${state}
% endif


def upgrade() -> None:
    """Upgrade schema."""
% if state:
    r = Revision.up(STATE, down_revision)
% endif
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    """Downgrade schema."""
% if state:
    r = Revision.down(STATE, down_revision)
% endif
    ${downgrades if downgrades else "pass"}
