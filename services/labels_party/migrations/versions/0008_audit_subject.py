"""audit events name their subject

Revision ID: 0008
Revises: 0007
The audit log grows past privacy domains (label sets, releases, the signing key in use): each
event names what it is about (``subject_id``: a label set, a release, a signing key id), indexed
so a release's charge can find the key that queued it. Earlier events keep a null subject.
"""

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('audit_events', sa.Column(
        'subject_id', sa.String(length=40), nullable=True,
        comment='what the event is about: a label set, a release, a signing key id',
    ))
    op.create_index('ix_audit_events_subject_id', 'audit_events', ['subject_id'])


def downgrade() -> None:
    op.drop_index('ix_audit_events_subject_id', table_name='audit_events')
    with op.batch_alter_table('audit_events') as batch:
        batch.drop_column('subject_id')
