"""The OpenAPI document of /v1/ (daemon/api/openapi.py): it lists every route the API serves,
it is served at /v1/openapi.json, and Schemathesis, generating bounded requests from it against
a real daemon on TCP with its token, finds no 500 and no answer that breaks the document."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance
from simhost import poll

from daemon.api import openapi
from daemon.api.server import make_app

MAX_EXAMPLES = 25  # per operation: bounded, a few seconds each


class _Nothing:
    """Enough of a daemon to build the app's routes (no request is served)."""


def test_every_route_has_its_operation_and_every_operation_its_route():
    served = set(openapi.routes_of(make_app(_Nothing())))
    documented = set(openapi.OPERATIONS)
    assert served - documented == set(), "routes without an entry in openapi.OPERATIONS"
    assert documented - served == set(), "entries in openapi.OPERATIONS without a route"


def test_the_document_is_valid_openapi():
    document = openapi.document(make_app(_Nothing()))
    schema = schemathesis.openapi.from_dict(document)  # validates it against OpenAPI 3.0
    operations = {f"{op.method.upper()} {op.path}" for op in
                  (result.ok() for result in schema.get_all_operations())}
    assert "GET /v1/health" in operations and "POST /v1/recommendations/{id}/apply" in operations
    # README's table calls it the document of all the routes it lists: /metrics, served on the
    # same app, was left out (routes_of read /v1/ only)
    assert "GET /metrics" in operations
    assert "text/plain" in document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert len(operations) == len(openapi.OPERATIONS)


@pytest.fixture(scope="module")
def live(shared_daemon):
    """A real daemon on TCP (the token beside its socket), recording idle-host: the session's
    shared daemon (tests/conftest.py). Without actions allowed, the only state the generated
    requests can change is a snapshot file (POST /v1/snapshots), which no other test reads."""
    daemon = shared_daemon
    port = poll(daemon.tcp_port, 30, "the TCP port", explain=daemon.log_tail)
    token = daemon.socket.with_name("mlcostd.token").read_text().strip()
    return daemon, f"http://127.0.0.1:{port}", token


def test_the_document_is_served_at_v1_openapi_json(live):
    daemon, _, _ = live
    served = daemon.call("_request", "GET", "/v1/openapi.json")
    assert served["openapi"].startswith("3.") and "/v1/health" in served["paths"]
    assert set(served["paths"]) == {path for _, path in openapi.OPERATIONS}


@pytest.fixture(scope="module")
def api_schema(live):
    _, base, token = live
    return schemathesis.openapi.from_url(f"{base}/v1/openapi.json",
                                         headers={"Authorization": f"Bearer {token}"})


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
def test_schemathesis_finds_no_500_and_no_schema_mismatch(case, live):
    daemon, base, token = live
    # Every check but positive_data_acceptance: OpenAPI 3.0 cannot say that a GPU metric needs
    # gpu= and a process metric process=, nor which processes exist, so a request valid by the
    # document may rightly be a 400 or 404.
    case.call_and_validate(base_url=base, headers={"Authorization": f"Bearer {token}"},
                           excluded_checks=[positive_data_acceptance], timeout=30)
    assert daemon.proc.poll() is None
