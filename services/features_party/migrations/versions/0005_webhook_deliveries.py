"""the inbox webhook's deliveries are rows of the catalogue

Revision ID: 0005
Revises: 0004
Written by hand (issue 24, issue 26 item 4): each inbox event's delivery to the publisher's
webhook is written with the event's own transaction and claimed by the senders, so a restart
loses none (labeldp.service.webhooks). A new table; no existing row changes.
"""

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'webhook_deliveries',
        sa.Column('id', sa.String(length=40), nullable=False, comment='whd_ and a digest of event id and target'),
        sa.Column('event_id', sa.String(length=64), nullable=False),
        sa.Column('event_type', sa.String(length=64), nullable=False),
        sa.Column('target', sa.String(length=2048), nullable=False, comment='the URL it is POSTed to'),
        sa.Column('body', sa.Text(), nullable=False, comment='the exact JSON bytes signed and sent'),
        sa.Column('state', sa.String(length=16), nullable=False, comment='pending, delivered or failed'),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('next_attempt_at', sa.Float(), nullable=False,
                  comment='unix time of the next attempt (pending)'),
        sa.Column('lease_until', sa.Float(), nullable=True,
                  comment='unix time until which a sender holds the row'),
        sa.Column('owner', sa.String(length=128), nullable=True, comment='the sender holding the lease'),
        sa.Column('last_outcome', sa.String(length=40), nullable=True,
                  comment='status class or error type, never the answer'),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_webhook_deliveries_due', 'webhook_deliveries', ['state', 'next_attempt_at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_webhook_deliveries_due', table_name='webhook_deliveries')
    op.drop_table('webhook_deliveries')
