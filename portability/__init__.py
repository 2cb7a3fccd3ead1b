"""Portability: Konshus v0.1, ``.mem`` bundles (portable-memory) and Persona Schema atoms.

Layout (trust lives in the pure modules; only ``service`` and ``cli`` touch a ledger):

* ``common``    limits, strict JSON, instants, ids, the import ``Plan``
* ``record``    the portable atom every format encodes/decodes; mapping to ledger input
* ``konshus``   Konshus v0.1 schema, provenance rule, import plan, export
* ``persona``   Persona memory atoms, consent rule, import plan, export
* ``membundle`` strict ``.mem`` verification (paths, checksums, sizes, signatures)
* ``mem``       ``.mem`` import plan and export through portable-memory's exporter
* ``view``      one subject read from the ledger, signatures verified
* ``service``   applying a plan: one ``import_records``, then one ``shred``
* ``cli``       ``ledger import`` / ``ledger export``

Decisions: docs/adr/0010-konshus-and-persona-portability.md,
docs/adr/0011-mem-bundles-and-tombstones.md.
"""
