"""label sets name their labels object by content

Revision ID: 0002
Revises: 0001
Why: two uploads computing the same next version wrote the same file, and the last writer
won even when its compare-and-swap lost; a content-addressed key per upload cannot collide.
"""

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('label_sets') as batch:
        batch.add_column(sa.Column(
            'labels_object', sa.String(length=200), nullable=True,
            comment='key of the current labels object (label_sets/<id>/labels/<sha256>); null: labels-<version>.npy',
        ))


def downgrade() -> None:
    with op.batch_alter_table('label_sets') as batch:
        batch.drop_column('labels_object')
