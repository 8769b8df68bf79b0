"""privacy domain id sources and the audit log

Revision ID: 0005
Revises: 0004
Each privacy domain declares the id namespace it owns (``id_source``, unique); a domain from
before this revision owns its own name as its id source (names were already unique). The
append-only ``audit_events`` table logs every domain change (services/labels_party/audit.py).
"""

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('privacy_domains', sa.Column(
        'id_source', sa.String(length=200), nullable=True,
        comment='the id namespace the domain owns, lower case; one domain per source',
    ))
    op.execute("UPDATE privacy_domains SET id_source = name")
    with op.batch_alter_table('privacy_domains') as batch:
        batch.alter_column(
            'id_source', existing_type=sa.String(length=200), nullable=False,
            existing_comment='the id namespace the domain owns, lower case; one domain per source',
        )
        batch.create_unique_constraint('uq_privacy_domains_id_source', ['id_source'])
    op.create_table('audit_events',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('privacy_domain_id', sa.String(length=40), nullable=True),
    sa.Column('privacy_domain', sa.String(length=200), nullable=True),
    sa.Column('key_id', sa.String(length=40), nullable=True, comment='null: the service itself'),
    sa.Column('scope', sa.String(length=32), nullable=True, comment='the scope the action needed'),
    sa.Column('details_json', sa.Text(), nullable=False, comment='what changed: public facts only (names, budgets)'),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )


def downgrade() -> None:
    op.drop_table('audit_events')
    with op.batch_alter_table('privacy_domains') as batch:
        batch.drop_constraint('uq_privacy_domains_id_source', type_='unique')
        batch.drop_column('id_source')
