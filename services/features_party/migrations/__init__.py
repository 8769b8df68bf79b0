"""The features party's Alembic migrations (env.py, versions/); run through labeldp.service.migrations."""
