"""Mechanism specs: one module per mechanism family, collected by labeldp.schema."""
