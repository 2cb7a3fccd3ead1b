"""``GET /metrics`` of `ledger serve --workers 2` (ADR 0054): one view over both processes.

Traffic of known shape goes to a real two-process server; every scrape (answered by
whichever process the connection reaches) reports the same counts, and they match what
was sent. The exposition carries route templates, never a path's ids: no subject ref, no
atom id, no content. Only an operator or auditor credential reads it; a refused scrape
changes nothing in the home. The server says when it answers and when it stopped, and
its private multiprocess folder is gone after it stopped.
"""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .serving import Server, home_digest, issue, serving

SUBJECT = "user_lynx_6203"
MARKER = "Vermilion-axolotl-8812"
ADDS, RECALLS = 7, 4


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _count(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], route: str,
           method: str, status: str) -> float:
    key = ("ledger_http_request_duration_seconds_count",
           (("method", method), ("route", route), ("status", status)))
    return samples.get(key, 0.0)


@pytest.mark.slow
def test_two_workers_report_one_view_of_the_traffic(home: Path, tmp_path: Path) -> None:
    _, op = issue(home, "operator-1", "operator")
    _, aud = issue(home, "auditor-1", "auditor")
    _, asst = issue(home, "assistant-1", "assistant", [SUBJECT])
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    with serving(home, "--workers", "2", env={"TMPDIR": str(private_tmp)}) as server:
        folders = list(private_tmp.glob("ledger-metrics-*"))
        assert len(folders) == 1 and stat.S_IMODE(folders[0].stat().st_mode) == 0o700
        a = server.client(asst)
        assert a.post("/v1/subjects", json={"ref": SUBJECT}).status_code == 201
        atoms = []
        for n in range(ADDS):
            r = a.post("/v1/atoms", json={"subject": SUBJECT,
                                          "text": f"{MARKER} fact number {n}"})
            assert r.status_code == 201, r.text
            atoms.append(r.json()["atom_id"])
        for _ in range(RECALLS):
            r = a.post("/v1/recall", json={"subject": SUBJECT, "query": f"{MARKER} fact",
                                           "rehearse": False})
            assert r.status_code == 200, r.text
        assert a.get(f"/v1/subjects/{SUBJECT}").status_code == 200
        assert a.get("/v1/atoms/no-such-atom").status_code == 404
        assert a.post("/v1/requests", json={"subject": SUBJECT,
                                            "reason": "GDPR Art. 17"}).status_code == 201

        # refused scrapes: no credential, an assistant's; nothing changes in the home
        before = home_digest(home)
        r = httpx.get(f"{server.url}/metrics", timeout=30)
        assert r.status_code == 401 and "ledger_" not in r.text
        r = a.get("/metrics")
        assert r.status_code == 403 and "ledger_" not in r.text
        assert "operator or auditor" in r.json()["detail"]
        assert home_digest(home) == before

        views = []
        for token in (op, aud, op, aud, op, aud):  # new connections: either process answers
            with server.client(token) as c:
                r = c.get("/metrics")
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("text/plain")
            for secret in (SUBJECT, MARKER, *atoms, "no-such-atom", op, aud, asst):
                assert secret not in r.text
            views.append(_samples(r.text))
    assert "ledger serve: listening on http://127.0.0.1:" in server.output()
    assert "authentication: bearer tokens; 2 workers" in server.output()
    assert "ledger serve: stopped" in server.output()
    assert not list(private_tmp.iterdir())  # the multiprocess folder went with the server

    traffic = [
        (("/v1/atoms", "POST", "201"), ADDS), (("/v1/recall", "POST", "200"), RECALLS),
        (("/v1/subjects", "POST", "201"), 1), (("/v1/subjects/{subject}", "GET", "200"), 1),
        (("/v1/atoms/{atom}", "GET", "404"), 1), (("/v1/requests", "POST", "201"), 1),
        (("/metrics", "GET", "403"), 1)]
    for view in views:
        for (route, method, status), sent in traffic:
            assert _count(view, route, method, status) == sent, (route, status, view)
        assert _count(view, "other", "GET", "401") == 1  # refused before routing
        assert view[("ledger_recall_duration_seconds_count", ())] == RECALLS
        assert view[("ledger_group_commit_size_sum", ())] == ADDS  # each add in one group
        groups = view[("ledger_group_commit_size_count", ())]
        assert 1 <= groups <= ADDS
        # the writer's commands: the groups, the subject, the request
        assert view[("ledger_signed_commands_total", ())] == groups + 2
        assert view[("ledger_writer_queue_depth", ())] == 0
        assert view[("ledger_erasure_requests", (("state", "open"),))] == 1
        assert view[("ledger_erasure_requests", (("state", "overdue"),))] == 0
        assert view[("ledger_kek_epoch_age_seconds", ())] > 0
        assert view[("ledger_read_model_lag_events", ())] >= 0
    # every process counted into the same view: the scrapes differ only by the scrapes
    first, last = views[0], views[-1]
    assert _count(last, "/metrics", "GET", "200") - _count(first, "/metrics", "GET", "200") \
        == len(views) - 1


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # a route not mounted
def test_no_metrics_serves_no_metrics_route(home: Path, tmp_path: Path) -> None:
    _, op = issue(home, "operator-1", "operator")
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    with serving(home, "--no-metrics", env={"TMPDIR": str(private_tmp)}) as server:
        assert not list(private_tmp.iterdir())
        r = server.client(op).get("/metrics")
        assert r.status_code == 404
        assert server.client(op).get("/v1/keys").status_code == 200
        server.proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert server.proc.wait(60) in (130, -signal.SIGINT)
    assert "ledger serve: stopped" in server.output()
    assert os.environ.get("PROMETHEUS_MULTIPROC_DIR") is None


@pytest.mark.slow
def test_witness_cosigning_lag(home: Path, tmp_path: Path) -> None:
    """How far the witnesses' cosignatures trail the log: events after the largest
    cosigned checkpoint, and the seconds since; nothing said while no witness is set."""
    from .conftest import run_cli
    from .witness_support import InProcessWitness

    _, op = issue(home, "operator-1", "operator")

    def scrape(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with server.client(op) as c:
            r = c.get("/metrics")
        assert r.status_code == 200, r.text
        return _samples(r.text)

    lag, age = ("ledger_witness_cosigning_lag_events", ()), \
        ("ledger_witness_cosigned_age_seconds", ())
    with serving(home) as server:
        view = scrape(server)
    assert lag not in view and age not in view  # no witness configured, none cosigned
    witness = InProcessWitness(tmp_path / "witness", "w.example/witness")
    try:
        witness.cosign_for(home)
        with serving(home) as server:  # the witness configured: read at start
            view = scrape(server)  # nothing cosigned yet: the whole log trails
            assert view[lag] > 0 and age not in view
            assert run_cli("--home", str(home), "checkpoint").code == 0
            assert scrape(server)[lag] == 0
            for ref in ("s1", "s2", "s3"):
                assert run_cli("--home", str(home), "subject", "add", ref).code == 0
            view = scrape(server)
            assert view[lag] == 3  # three events since the cosigned checkpoint
            assert 0 <= view[age] < 600
    finally:
        witness.stop()
