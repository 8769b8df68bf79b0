"""Alembic environment of the features party: its models are the target (labeldp.migrations runs it)."""

from features_party.store import Base
from labeldp.migrations import run_migrations

run_migrations(Base.metadata)
