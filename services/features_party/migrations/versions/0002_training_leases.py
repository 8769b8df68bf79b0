"""training jobs: owner, lease, heartbeat, attempt, live progress

Revision ID: 0002
Revises: 0001
Written by hand (issue 23): the first revision after the initial schema, so databases
deployed at 0001 upgrade in place. Existing rows get no owner and no lease; a training
an older process had started counts as claimed once (attempt 1), the rest 0. A row left
``running`` without a lease is taken as expired by the next worker (its process predates
leases and cannot renew one).
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('owner', sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('attempt', sa.Integer(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('live', sa.JSON(), nullable=True))
    op.execute("UPDATE trainings SET attempt = 1 WHERE started_at IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.drop_column('live')
        batch_op.drop_column('attempt')
        batch_op.drop_column('heartbeat_at')
        batch_op.drop_column('lease_expires_at')
        batch_op.drop_column('owner')
