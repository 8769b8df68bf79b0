"""ledger garbage

Revision ID: 0007
Revises: 0005
Ledger objects a bucket's compare-and-swap superseded, deleted by the sweep after
``LABELDP_LEDGER_GRACE_SECONDS`` (services/labels_party/ledger.py, ``collect_garbage``).
A new, empty table: objects superseded before this revision are found by the sweep's
unreferenced-object pass instead.
"""

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('ledger_garbage',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('domain_id', sa.String(length=40), nullable=False),
    sa.Column('object_key', sa.String(length=300), nullable=False),
    sa.Column('superseded_at', sa.Float(), nullable=False, comment='POSIX seconds of the swap'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_ledger_garbage_domain_id', 'ledger_garbage', ['domain_id'])
    op.create_index('ix_ledger_garbage_object_key', 'ledger_garbage', ['object_key'])
    op.create_index('ix_ledger_garbage_superseded_at', 'ledger_garbage', ['superseded_at'])


def downgrade() -> None:
    op.drop_table('ledger_garbage')
