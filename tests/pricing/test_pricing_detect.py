"""Detection against local servers that speak each cloud's metadata protocol."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from pricing.detect import AZURE_ASSET_TAG, clear_detect_cache, detect

OFF_CLOUD = "off-cloud: no DMI vendor and no metadata service answered within 1.0 s"


class MetadataHandler(BaseHTTPRequestHandler):
    server_version = "fake-metadata"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep test output quiet
        pass

    def send(self, status: int, body: str = "", headers: dict | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        self.server.requests.append(("PUT", self.path))
        self.server.cloud.put(self)

    def do_GET(self):
        self.server.requests.append(("GET", self.path))
        self.server.cloud.get(self)


class FakeAWS:
    """IMDSv2: PUT a token (TTL header required), then GET with that token; else 401."""

    def __init__(self, lifecycle="spot", accept_tokens=True):
        self.lifecycle, self.accept_tokens = lifecycle, accept_tokens
        self.data = {"instance-type": "g5.xlarge", "placement/region": "us-east-1",
                     "instance-life-cycle": lifecycle, "instance-id": "i-0123456789abcdef0"}

    def put(self, h):
        if h.path != "/latest/api/token" or not h.headers.get(
                "X-aws-ec2-metadata-token-ttl-seconds"):
            return h.send(400, "missing TTL")
        h.send(200, "AQAEAtoken==")

    def get(self, h):
        token = h.headers.get("X-aws-ec2-metadata-token")
        if not self.accept_tokens or token != "AQAEAtoken==":
            return h.send(401, "")
        key = h.path.removeprefix("/latest/meta-data/")
        if key in self.data:
            return h.send(200, self.data[key], {"Content-Type": "text/plain"})
        h.send(404, "Not Found")


class FakeGCP:
    def __init__(self, flavor_header=True, model="SPOT"):
        self.flavor_header = flavor_header
        self.data = {"machine-type": "projects/1234/machineTypes/g2-standard-4",
                     "zone": "projects/1234/zones/us-central1-a",
                     "scheduling/provisioning-model": model}

    def put(self, h):
        h.send(405)

    def get(self, h):
        if h.headers.get("Metadata-Flavor") != "Google":
            return h.send(403, "Missing Metadata-Flavor:Google header.")
        key = h.path.removeprefix("/computeMetadata/v1/instance/")
        headers = {"Metadata-Flavor": "Google"} if self.flavor_header else {}
        if key in self.data:
            return h.send(200, self.data[key], headers)
        h.send(404, "", headers)


class FakeAzure:
    def __init__(self, priority="Spot"):
        self.data = {"vmSize": "Standard_NC24ads_A100_v4", "location": "eastus",
                     "priority": priority}

    def put(self, h):
        h.send(405)

    def get(self, h):
        url = urlparse(h.path)
        query = parse_qs(url.query)
        if h.headers.get("Metadata") != "true":
            return h.send(400, '{"error": "Bad request. Required metadata header not specified"}')
        if query.get("api-version") != ["2021-02-01"] or query.get("format") != ["text"]:
            return h.send(400, '{"error": "Bad request. api-version/format"}')
        key = url.path.removeprefix("/metadata/instance/compute/")
        if key in self.data:
            return h.send(200, self.data[key])
        h.send(404)


@pytest.fixture
def serve():
    servers = []

    def start(cloud):
        server = ThreadingHTTPServer(("127.0.0.1", 0), MetadataHandler)
        server.daemon_threads = True
        server.cloud, server.requests = cloud, []
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return server, f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def closed_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def black_hole():
    """Accepts connections (the kernel does) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED", raising=False)
    clear_detect_cache()
    yield
    clear_detect_cache()


def dmi(tmp_path, **fields):
    root = tmp_path / "dmi"
    root.mkdir(exist_ok=True)
    for name, value in fields.items():
        (root / name).write_text(value + "\n")
    return root


def everywhere(url):
    return {"aws": url, "gcp": url, "azure": url}


def test_aws_imdsv2_with_dmi(tmp_path, serve, closed_port):
    server, url = serve(FakeAWS())
    root = dmi(tmp_path, sys_vendor="Amazon EC2", product_name="g5.xlarge",
               bios_vendor="Amazon EC2")
    found = detect(dmi_root=root, endpoints={**everywhere(closed_port), "aws": url})
    assert (found.provider, found.instance_type, found.region, found.lifecycle) == (
        "aws", "g5.xlarge", "us-east-1", "spot")
    assert found.instance_id == "i-0123456789abcdef0"  # what a resize acts on
    assert found.source == "aws metadata (IMDSv2) (cloud from DMI)"
    assert server.requests[0] == ("PUT", "/latest/api/token")
    # DMI named the cloud: only one service was asked.
    assert {path for _, path in server.requests} >= {"/latest/meta-data/instance-type"}


def test_aws_token_rejected_is_not_trusted(tmp_path, serve, closed_port):
    server, url = serve(FakeAWS(accept_tokens=False))
    root = dmi(tmp_path, sys_vendor="Amazon EC2")
    found = detect(dmi_root=root, endpoints={**everywhere(closed_port), "aws": url})
    assert found.provider == "aws" and found.instance_type is None  # DMI still says AWS
    assert "HTTP 401" in found.detail
    assert found.source == "dmi (aws); metadata did not answer"


def test_fake_aws_demands_the_token(serve):
    import urllib.error
    import urllib.request

    _, url = serve(FakeAWS())
    with pytest.raises(urllib.error.HTTPError) as excinfo:
        urllib.request.urlopen(f"{url}/latest/meta-data/instance-type", timeout=1)
    assert excinfo.value.code == 401


def test_gcp_with_dmi(tmp_path, serve, closed_port):
    _, url = serve(FakeGCP())
    root = dmi(tmp_path, sys_vendor="Google", product_name="Google Compute Engine")
    found = detect(dmi_root=root, endpoints={**everywhere(closed_port), "gcp": url})
    assert (found.provider, found.instance_type, found.region, found.lifecycle) == (
        "gcp", "g2-standard-4", "us-central1", "spot")


def test_gcp_impostor_without_flavor_header_is_rejected(tmp_path, serve, closed_port):
    _, url = serve(FakeGCP(flavor_header=False))
    found = detect(dmi_root=dmi(tmp_path), endpoints={**everywhere(closed_port), "gcp": url})
    assert found.provider is None
    assert found.source == OFF_CLOUD
    assert "without 'Metadata-Flavor: Google'" in found.detail


def test_azure_with_dmi(tmp_path, serve, closed_port):
    _, url = serve(FakeAzure())
    root = dmi(tmp_path, sys_vendor="Microsoft Corporation", product_name="Virtual Machine",
               chassis_asset_tag=AZURE_ASSET_TAG)
    found = detect(dmi_root=root, endpoints={**everywhere(closed_port), "azure": url})
    assert (found.provider, found.instance_type, found.region, found.lifecycle) == (
        "azure", "Standard_NC24ads_A100_v4", "eastus", "spot")


def test_hyperv_vm_off_azure_is_off_cloud(tmp_path, closed_port):
    root = dmi(tmp_path, sys_vendor="Microsoft Corporation", product_name="Virtual Machine")
    found = detect(dmi_root=root, endpoints=everywhere(closed_port))
    assert found.provider is None and found.source.startswith("off-cloud")


def test_no_dmi_probes_all_three_in_parallel(tmp_path, serve, black_hole):
    _, url = serve(FakeAzure(priority="Regular"))
    # The answering one wins while the others never answer (how long that takes: bench/detect.py).
    found = detect(dmi_root=dmi(tmp_path), endpoints={**everywhere(black_hole), "azure": url})
    assert (found.provider, found.lifecycle) == ("azure", "on-demand")


def test_off_cloud_closed_ports_says_off_cloud(tmp_path, closed_port):
    found = detect(dmi_root=dmi(tmp_path), endpoints=everywhere(closed_port))
    assert found.provider is None and found.instance_type is None
    assert found.source == OFF_CLOUD


def test_off_cloud_server_that_never_answers_ends_off_cloud(tmp_path, black_hole):
    # Within its ~1 s budget (timed in bench/detect.py): the daemon's start never waits on it.
    found = detect(dmi_root=tmp_path / "no-dmi-here", endpoints=everywhere(black_hole))
    assert found.source == OFF_CLOUD
    assert "no DMI vendor" in found.detail


def test_aws_metadata_disabled_by_env(tmp_path, serve, monkeypatch):
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    server, url = serve(FakeAWS())
    found = detect(dmi_root=dmi(tmp_path, sys_vendor="Amazon EC2"), endpoints=everywhere(url))
    assert server.requests == []
    assert found.provider == "aws" and found.instance_type is None
    assert "AWS_EC2_METADATA_DISABLED=true" in found.detail


def test_config_override_wins_without_probing(tmp_path, serve):
    server, url = serve(FakeAWS())
    found = detect({"provider": "GCP", "type": "a2-highgpu-1g", "region": "us-central1",
                    "lifecycle": "spot"}, dmi_root=dmi(tmp_path, sys_vendor="Amazon EC2"),
                   endpoints=everywhere(url))
    assert (found.provider, found.instance_type, found.lifecycle, found.source) == (
        "gcp", "a2-highgpu-1g", "spot", "config")
    assert server.requests == []


def test_partial_override_merges_with_detection(tmp_path, serve, closed_port):
    _, url = serve(FakeAWS(lifecycle="on-demand"))

    class Config:
        provider = None
        instance_type = None
        region = None
        lifecycle = "commit-1y"

    found = detect(Config(), dmi_root=dmi(tmp_path, sys_vendor="Amazon EC2"),
                   endpoints={**everywhere(closed_port), "aws": url})
    assert (found.instance_type, found.lifecycle) == ("g5.xlarge", "commit-1y")
    assert found.source.startswith("config + aws metadata")


def test_result_is_cached_per_process(tmp_path, serve, closed_port):
    server, url = serve(FakeAWS())
    kwargs = {"dmi_root": dmi(tmp_path, sys_vendor="Amazon EC2"),
              "endpoints": {**everywhere(closed_port), "aws": url}}
    first = detect(**kwargs)
    count = len(server.requests)
    assert detect(**kwargs) is first and len(server.requests) == count
    clear_detect_cache()
    assert detect(**kwargs) == first and len(server.requests) == 2 * count
