"""The `ledger` command: a surface above the server (ADR 0042). `cli/main.py` builds the
command tree and maps errors to exit codes; each module beside it mounts a group of
commands that parse, call the facade (`service/`) as the local operator, and print."""
