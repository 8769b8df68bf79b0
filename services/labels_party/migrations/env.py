"""Alembic environment of the labels party: its models are the target (labeldp.migrations runs it)."""

from labeldp.migrations import run_migrations
from labels_party.store import Base

run_migrations(Base.metadata)
