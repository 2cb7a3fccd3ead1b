from ledger.cli import entry

entry()
