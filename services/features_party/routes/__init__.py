"""The features party's HTTP routes: one module per resource, each an ``APIRouter``.

A handler reads its request, calls the domain functions (``features_party.feature_tables``,
``inbox``, ``trainings``, ``models``, ``model_delivery``) and returns the body its
``response_model`` (``features_party.responses``) validates; ``features_party.app`` only
assembles them. What a handler needs comes through FastAPI ``Depends`` (:mod:`.deps`). There
is deliberately no route or client that reaches the labels party.
"""
