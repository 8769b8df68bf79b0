"""Alembic environment of the features party: its models are the target (labeldp.service.migrations runs it)."""

from features_party.store import Base
from labeldp.service.migrations import run_migrations

run_migrations(Base.metadata)
