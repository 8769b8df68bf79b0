"""Benchmark library behind ``labeldp bench``: data sets, protocol runner, tables and plots."""
