"""ledger buckets

Revision ID: 0003
Revises: 0002
The per-id ledger in hash buckets (services/labels_party/ledger.py). Existing domains keep
their files and ``id_segments`` > 0; the service buckets them on first use.
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('privacy_domains', sa.Column('n_buckets', sa.Integer(), server_default='1024', nullable=False))
    op.create_table('ledger_buckets',
    sa.Column('domain_id', sa.String(length=40), nullable=False),
    sa.Column('bucket', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.Column('object_key', sa.String(length=300), nullable=False),
    sa.Column('object_batch', sa.Integer(), nullable=False, comment="the bucket's record batch in the object"),
    sa.Column(
        'chain_json', sa.Text(), nullable=False, comment='charges since the base: [name of a charge object, …]'
    ),
    sa.Column('chain_ids', sa.BigInteger(), nullable=False, comment='positions the chain holds, summed'),
    sa.Column('n_ids', sa.BigInteger(), nullable=False),
    sa.Column('max_epsilon_micro', sa.BigInteger(), nullable=False, comment='the most one id of the bucket spent'),
    sa.Column('ids_exhausted', sa.BigInteger(), nullable=False, comment='ids with no ε left'),
    sa.ForeignKeyConstraint(['domain_id'], ['privacy_domains.id'], ),
    sa.PrimaryKeyConstraint('domain_id', 'bucket')
    )


def downgrade() -> None:
    op.drop_table('ledger_buckets')
    with op.batch_alter_table('privacy_domains') as batch:
        batch.drop_column('n_buckets')
