"""A witness of other ledgers' transparency logs (c2sp.org/tlog-witness): its home and
durable state (:mod:`witness.state`) and its HTTP API (:mod:`witness.server`).

The witness is an actor of its own, run by whoever audits a ledger, not a part of the
ledger: it imports the protocol's shared pieces (``ledger.witness``: the wire format,
cosignatures, policies and the log's client) and nothing of the ledger's application.
"""
