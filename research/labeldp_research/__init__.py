"""Benchmark library behind ``python -m labeldp_research``: data sets, protocol runner, tables and plots."""
