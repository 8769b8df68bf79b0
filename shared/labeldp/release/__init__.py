"""The release pipeline: pick the mechanism, obtain its prior, fit it, privatize."""
