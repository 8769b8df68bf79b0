"""release messages as a signed manifest of shards

Revision ID: 0003
Revises: 0002
Written by hand (issue 22, item 4): a release keeps its signed manifest (at most 1 MiB) and
one row per shard it holds, each naming its object in the store; no value larger than 1 MiB.
Releases received whole before this revision keep their single-body message in ``body``
(now nullable) and count as complete; their status defaults so.
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('releases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('status', sa.String(length=16), server_default='complete', nullable=False))
        batch_op.add_column(sa.Column('manifest', sa.LargeBinary(), nullable=True))
        batch_op.add_column(sa.Column('shard_count', sa.Integer(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.alter_column('body', existing_type=sa.LargeBinary(), nullable=True)
    op.create_table('release_shards',
    sa.Column('release_id', sa.String(length=256), nullable=False),
    sa.Column('shard_index', sa.Integer(), nullable=False),
    sa.Column('object_key', sa.String(length=512), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('rows', sa.BigInteger(), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['release_id'], ['releases.release_id'], ),
    sa.PrimaryKeyConstraint('release_id', 'shard_index')
    )


def downgrade() -> None:
    # A sharded release has no single body to go back to: a downgrade keeps only those received whole.
    op.drop_table('release_shards')
    op.execute("DELETE FROM trainings WHERE release_id IN (SELECT release_id FROM releases WHERE body IS NULL)")
    op.execute("DELETE FROM releases WHERE body IS NULL")
    with op.batch_alter_table('releases', schema=None) as batch_op:
        batch_op.alter_column('body', existing_type=sa.LargeBinary(), nullable=False)
        batch_op.drop_column('completed_at')
        batch_op.drop_column('shard_count')
        batch_op.drop_column('manifest')
        batch_op.drop_column('status')
