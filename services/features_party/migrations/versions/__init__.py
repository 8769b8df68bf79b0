"""Revisions of the features party's schema (a package so that installs ship them)."""
