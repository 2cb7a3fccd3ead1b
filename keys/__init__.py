"""Key management: signing keys, the key roster, and data keys for crypto-shredding.

This package imports nothing from the rest of memory-ledger. Pure pieces
(`signing`, `roster`, `aead`) take bytes and return values or raise; `keyring`
and `datakeys` own files and databases.
"""
