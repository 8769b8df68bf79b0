"""The features party (publisher) service.

It holds feature tables, receives one signed ε-DP message of privatized labels per
release from the labels party, joins it to its own features and trains regression
models on them. Nothing ever flows back to the labels party: this package has no
client for it. The app factory is :func:`features_party.app.create_app`.
"""
