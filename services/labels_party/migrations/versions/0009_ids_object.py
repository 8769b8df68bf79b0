"""label sets name their uploaded ids object

Revision ID: 0009
Revises: 0008
Why: an ids upload copied its sorted object into place under the domain's lock, a copy that
grows with the ids (issue 22); writing it under its own key first and naming it under the lock
keeps the lock short and a concurrent upload's object apart from the winner's.
"""

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('label_sets') as batch:
        batch.add_column(sa.Column(
            'ids_object', sa.String(length=200), nullable=True,
            comment='key of the sorted ids object (label_sets/<id>/ids-<uuid>.arrow); null: ids.arrow',
        ))


def downgrade() -> None:
    with op.batch_alter_table('label_sets') as batch:
        batch.drop_column('ids_object')
