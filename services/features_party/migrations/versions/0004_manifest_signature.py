"""a release keeps the signature of its manifest

Revision ID: 0004
Revises: 0003
Written by hand (issue 24, item 2): the features party keeps the manifest's Ed25519
signature header as received, so it can show the signed manifest as proof of what the labels
party sent. Releases received before keep none (null).
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('releases', schema=None) as batch_op:
        batch_op.add_column(sa.Column('signature', sa.String(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('releases', schema=None) as batch_op:
        batch_op.drop_column('signature')
