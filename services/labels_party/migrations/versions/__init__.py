"""Revisions of the labels party's schema (a package so that installs ship them)."""
