"""a training keeps the id of the feature table it joined

Revision ID: 0006
Revises: 0005
Written by hand (issue 26, item 3: one way to refer to a resource, its id): a training keeps
the ``ft_`` id of the table content it was queued on, beside the table's name, so trainings and
model cards carry both. Trainings queued before keep none (null): the table may have been
replaced since, and its id now names other content.
"""

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('feature_table_id', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('trainings', schema=None) as batch_op:
        batch_op.drop_column('feature_table_id')
