"""The service plumbing both services share: settings, database, HTTP edge, logs, metrics."""
