"""``ledger extract ARTIFACT|--subject S``: memories proposed by a configured model endpoint
(ADR 0053), mounted on the ``ledger`` CLI by :func:`register`. Off until ``[extract]`` of
the home's config.toml (or ``LEDGER_EXTRACT_URL``/``_MODEL``) names an OpenAI-compatible
endpoint; the key is read from ``LEDGER_EXTRACT_API_KEY`` only. Heavy imports stay inside
the command; it calls the service as the local operator (cli/main.py's ``served``).
"""

from __future__ import annotations

from typing import Annotated

import typer

from cli.opener import Served
from cli.output import JsonOpt, out, verdict

_served: list[Served] = []


def register(cli: typer.Typer, served: Served) -> None:
    _served[:] = [served]
    cli.command("extract")(extract_command)


def extract_command(
    artifact: Annotated[str | None, typer.Argument(
        help="The artifact's ref or id (an imported chat, a document).")] = None,
    subject: Annotated[str | None, typer.Option(
        "--subject", help="Every artifact of this subject instead (one signed command).")]
    = None,
    max_memories: Annotated[int, typer.Option(
        "--max", min=1, max=50, help="At most this many memories per artifact.")] = 20,
    on_similar: Annotated[str, typer.Option(
        "--on-similar", help="A proposal that says what a memory of the subject says: "
                             "rehearse that memory (default), add it anyway, supersede it, "
                             "or refuse the whole extraction.")] = "rehearse",
    actor: Annotated[str | None, typer.Option(
        "--as", help="Name of the key that signs (default: the home's writer key).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Propose memories from artifacts with the model endpoint configured in [extract]
    (OpenAI-compatible chat completions), and record them as inferred memories of the
    artifact's subject, citing it, in one signed command. Any invalid answer writes
    nothing. Off unless configured: nothing leaves this machine otherwise.

    Example: ledger extract --subject user_42 --max 10
    """
    from ledger import progress
    from ledger.errors import InputError
    from service import extraction

    with _served[0](actor) as (svc, me):  # a missing home: exit 3 before the usage check
        if (artifact is None) == (subject is None):
            raise InputError("give one ARTIFACT or --subject S",
                             hint="e.g. `ledger extract --subject user_42`")
        endpoint = extraction.configured_endpoint(svc)  # off: exit 3 here
        ids = [artifact] if artifact is not None else extraction.artifacts_of(svc, me,
                                                                              str(subject))
        with progress.bar("Asking the model", total=len(ids), json=as_json) as bar:
            done = extraction.extract_with_endpoint(
                svc, me, endpoint, ids, max_memories, progress=bar.advance,
                on_similar=on_similar)  # type: ignore[arg-type]  # checked by record()
    data = done.model_dump()
    out(data, as_json, "\n".join(done.atom_ids))
    m = len(done.artifacts)
    if not done.atom_ids:
        verdict(f"OK: the model proposed no memories from {m} artifact(s); nothing was written")
        return
    n, again = len(done.atom_ids), done.outcomes.count("rehearsed")
    new = n - again
    said = f", {again} already known (rehearsed)" if again else ""
    verdict(f"OK: recorded {new} inferred memor{'y' if new == 1 else 'ies'} from {m} "
            f"artifact(s){said}, extractor {done.extractor}; review them with `ledger memory "
            "list --subject REF` and correct or delete any that are wrong")
