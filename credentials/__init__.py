"""Credentials at the door (ADR 0028, ADR 0069): what turns a presented credential into a
:class:`~service.caller.Caller`.

* :mod:`credentials.auth`: the ``Authorization`` header parsed, the refusals
  (:class:`~credentials.auth.AuthError` and its family) and ``WWW-Authenticate``;
* :mod:`credentials.tokens`: the ledger's own bearer tokens, argon2id hashes in their own
  table (:class:`~credentials.tokens.TokenStore`);
* :mod:`credentials.oauth`: JWT access tokens checked offline against a JWKS;
* :mod:`credentials.fleet`: a fleet opened with its tokens, and the tenant a fleet token
  reaches.

The surfaces (``server/``, ``cli/``) authenticate here and hand the use cases a
``Caller``; the use cases (``service/``) import nothing of this package and never see a
token (.importlinter's layers).
"""
