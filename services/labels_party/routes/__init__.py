"""The labels party's HTTP routes: one module per resource, each an ``APIRouter``.

A handler reads its request, calls one domain function (``labels_party.privacy_domains``,
``label_sets``, ``uploads``, ``releases``) and returns the body its ``response_model``
(``labels_party.responses``) validates; ``labels_party.app`` only assembles them. What a
handler needs comes through FastAPI ``Depends`` (:mod:`.deps`).
"""
