"""release jobs: owner, lease, attempts, the request a worker runs, failure, message retention

Revision ID: 0004
Revises: 0003
Written by hand (issue 22, item 5): a release is accepted as a job and charged later by a
release worker, so what only the charge knows (accounting, message file, size, digest)
becomes nullable until then. Existing rows are charged releases: they keep every value,
get no owner, no lease and zero job attempts.
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('releases', schema=None) as batch_op:
        batch_op.alter_column('accounting_json', existing_type=sa.Text(), nullable=True)
        batch_op.alter_column('message_file', existing_type=sa.String(length=200), nullable=True)
        batch_op.alter_column('message_bytes', existing_type=sa.BigInteger(), nullable=True)
        batch_op.alter_column('message_sha256', existing_type=sa.String(length=64), nullable=True)
        batch_op.add_column(sa.Column(
            'request_json', sa.Text(), nullable=True,
            comment='the release request a worker runs (mechanism, ε, params, a public prior)'))
        batch_op.add_column(sa.Column(
            'job_owner', sa.String(length=128), nullable=True, comment='the release worker holding it'))
        batch_op.add_column(sa.Column(
            'job_lease_until', sa.Float(), server_default='0', nullable=False,
            comment='unix time after which the job may be taken over'))
        batch_op.add_column(sa.Column(
            'job_attempts', sa.Integer(), server_default='0', nullable=False, comment='claims by workers'))
        batch_op.add_column(sa.Column('error_code', sa.String(length=64), nullable=True, comment='why the job failed'))
        batch_op.add_column(sa.Column('error_message', sa.String(length=300), nullable=True))
        batch_op.add_column(sa.Column(
            'message_removed_at', sa.DateTime(timezone=True), nullable=True,
            comment='when the retention sweep removed the message object'))


def downgrade() -> None:
    op.execute("DELETE FROM releases WHERE status IN ('queued', 'running', 'failed')")
    with op.batch_alter_table('releases', schema=None) as batch_op:
        for column in ('message_removed_at', 'error_message', 'error_code', 'job_attempts', 'job_lease_until',
                       'job_owner', 'request_json'):
            batch_op.drop_column(column)
        batch_op.alter_column('message_sha256', existing_type=sa.String(length=64), nullable=False)
        batch_op.alter_column('message_bytes', existing_type=sa.BigInteger(), nullable=False)
        batch_op.alter_column('message_file', existing_type=sa.String(length=200), nullable=False)
        batch_op.alter_column('accounting_json', existing_type=sa.Text(), nullable=False)
