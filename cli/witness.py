"""``ledger witness ...``: run a witness (init, add-log, serve), and tell a ledger which
witnesses cosign its checkpoints (use, forget). Heavy imports stay inside the commands."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from cli.opener import Served
from cli.output import JsonOpt, out

HomeOpt = Annotated[Path, typer.Option(
    "--home", envvar="LEDGER_WITNESS_HOME",
    help="The witness's own home folder (not a ledger home).")]


def register(cli: typer.Typer, served: Served) -> None:
    app = typer.Typer(no_args_is_help=True, help="A C2SP tlog-witness that cosigns other "
                      "ledgers' checkpoints, and the witnesses this ledger asks.")
    cli.add_typer(app, name="witness")

    @app.command("init")
    def witness_init(home: HomeOpt, name: Annotated[str, typer.Option(
            help="The witness's name, a schema-less URL such as dpo.example/witness.")],
            as_json: JsonOpt = False) -> None:
        """Create a witness home with a new Ed25519 key; prints its verifier key.

        Example: ledger witness init --home /srv/witness --name dpo.example/witness
        """
        from witness.state import init_home

        vkey = init_home(home, name)
        out({"home": str(home), "name": name, "vkey": vkey}, as_json, vkey)
        sys.stderr.write(f"OK: witness {name} created in {home}; give the logs its key\n")

    @app.command("add-log")
    def witness_add_log(key: Annotated[str, typer.Option(
                            "--key", help="The log's verifier key (vkey), as printed by "
                                          "`ledger checkpoint --vkey`; its name is the log's "
                                          "origin.")],
                        home: HomeOpt,
                        origin: Annotated[str | None, typer.Argument(
                            help="The log's origin line; optional, the vkey names it (a "
                                 "different one is refused).")] = None,
                        as_json: JsonOpt = False) -> None:
        """Follow a log: cosign its checkpoints once they verify under KEY, a vkey whose
        name is the log's origin.

        Example: ledger witness add-log --key "$(cat log.vkey)" --home /srv/witness
        """
        from witness.state import Witness

        w = Witness(home)
        try:
            origin = w.add_log(origin, key)
        finally:
            w.close()
        out({"origin": origin, "vkey": key}, as_json, origin)
        sys.stderr.write(f"OK: witness follows {origin}\n")

    @app.command("logs")
    def witness_logs(home: HomeOpt, as_json: JsonOpt = False) -> None:
        """The logs this witness follows, the size it last cosigned, and the evidence it kept
        (forks, failed proofs).  Example: ledger witness logs --home /srv/witness --json"""
        from witness.state import Witness

        w = Witness(home)
        try:
            logs = w.logs()
            data = {"vkey": w.vkey, "logs": logs,
                    "evidence": [{k: v for k, v in e.items() if k not in ("note", "stored_note")}
                                 for e in w.evidence()]}
        finally:
            w.close()
        text = "\n".join(f"{r['origin']}  size {r['size'] if r['size'] is not None else '-'}"
                         for r in logs)
        out(data, as_json, text or "(no logs)")

    @app.command("serve")
    def witness_serve(home: HomeOpt, listen: Annotated[str, typer.Option(
            help="HOST:PORT to listen on; port 0 picks a free one.")] = "127.0.0.1:0",
            prefix: Annotated[str, typer.Option(help="Submission prefix path.")] = "",
            port_file: Annotated[Path | None, typer.Option(
                help="Write the port listened on to this file.")] = None) -> None:
        """Serve the tlog-witness API until interrupted: POST <prefix>/add-checkpoint, and
        GET <prefix>/<sha256 of a log's origin, hex>/checkpoint (the latest it cosigned).

        Example: ledger witness serve --home /srv/witness --listen 127.0.0.1:8411
        """
        from ledger.errors import InputError
        from witness.server import serve

        host, sep, port = listen.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise InputError(f"--listen {listen!r} is not HOST:PORT")

        def announce(url: str, vkey: str) -> None:
            sys.stderr.write(f"OK: witness listening on {url} (key {vkey})\n")
            sys.stderr.flush()

        serve(home, host.strip("[]"), int(port), prefix, port_file, announce)

    @app.command("use")
    def witness_use(url: Annotated[str, typer.Argument(help="The witness's submission URL.")],
                    key: Annotated[str, typer.Option(
                        "--key", help="The witness's verifier key (type 0x04), from "
                                      "`ledger witness init`.")],
                    as_json: JsonOpt = False) -> None:
        """Have this ledger's checkpoints (erasures included) cosigned by a witness; written
        to config.toml's [[witnesses]].

        Example: ledger witness use http://127.0.0.1:8411 --key dpo.example/witness+...
        """
        with served() as (svc, me):
            used = svc.use_witness(me, url, key)
        out({"url": used.url, "vkey": used.vkey}, as_json, used.vkey)
        sys.stderr.write(f"OK: checkpoints will be sent to {used.url}\n")

    @app.command("policy")
    def witness_policy(out_file: Annotated[Path | None, typer.Option(
            "--out", help="Write the policy to this file (else print it).")] = None,
            quorum: Annotated[str, typer.Option(
                help="Cosignatures a checkpoint needs: all, any, a number of the witnesses, "
                     "or none.")] = "all",
            as_json: JsonOpt = False) -> None:
        """Write the c2sp.org/tlog-policy that checks this ledger's checkpoints: its log key,
        the witnesses it asks (`ledger witness use`) and a quorum of them, for
        `verify-pack --policy` and `audit-tools verify-receipt --policy`.

        Example: ledger witness policy --out witnesses.policy --quorum all --json
        """
        with served() as (svc, me):
            made = svc.witness_policy(me, quorum)
        if out_file is not None:
            from keys.files import write_file
            from ledger.errors import InputError

            try:
                write_file(out_file, made.policy)  # 0o644: a policy holds public keys only
            except OSError as e:
                raise InputError(f"cannot write {out_file}: {e}") from e
        data = {**made.model_dump(), "out": None if out_file is None else str(out_file)}
        out(data, as_json, made.policy if out_file is None else str(out_file))
        from ledger.text import plural

        sys.stderr.write(f"OK: policy of {plural(len(made.witnesses), 'witnesses')}"
                         f"{f' written to {out_file}' if out_file else ''}; {made.quorum}\n")

    @app.command("forget")
    def witness_forget(key: Annotated[str, typer.Argument(help="The witness's vkey or URL.")],
                       as_json: JsonOpt = False) -> None:
        """Stop asking a witness.  Example: ledger witness forget http://127.0.0.1:8411"""
        with served() as (svc, me):
            svc.forget_witness(me, key)
        out({"removed": key}, as_json, key)
