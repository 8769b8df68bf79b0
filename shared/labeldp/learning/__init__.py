"""The training engine: configuration, one epoch loop, networks, debiasing, staging, export."""
