"""Alembic environment of the labels party: its models are the target (labeldp.service.migrations runs it)."""

from labeldp.service.migrations import run_migrations
from labels_party.store import Base

run_migrations(Base.metadata)
