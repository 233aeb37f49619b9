"""Vertex AI machine prices from the Cloud Billing Catalog (a local server shaped like it)."""

from __future__ import annotations

import json

import pytest
from local_http import LocalServer, ok
from test_pricing_refresh_gcp import KEY, key_file, sku  # noqa: F401 (fixture)

from pricing.cache import read_cache, write_cache
from pricing.catalog import Catalog
from pricing.managed import compare_managed
from pricing.refresh_vertex import refresh_vertex, vertex_sku_part

PATH = "/services/C7E2-9256-1C43/skus"


def vsku(description: str, usd: float, group: str = "GPU", usage: str = "OnDemand") -> dict:
    entry = sku(description, usage, usd, group)
    entry["category"]["serviceDisplayName"] = "Vertex AI"
    entry["category"]["resourceFamily"] = "ApplicationServices"
    entry["name"] = entry["name"].replace("6F81-5844-456A", "C7E2-9256-1C43")
    return entry


# Descriptions and us-central1 prices as a Google Cloud Japan article shows them (2025-08):
# the H100, A3 vCPU and RAM SKUs of training and of prediction.
A3_TRAINING = [vsku("Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa", 11.2660332),
               vsku("Vertex AI: Training/Pipelines on A3 Instance Core in Iowa", 0.0293227,
                    "CPU"),
               vsku("Vertex AI: Training/Pipelines on A3 Instance RAM in Iowa", 0.0025534,
                    "RAM")]
A3_PREDICTION = [
    vsku("Vertex AI: Online/Batch Prediction Nvidia H100 80gb GPU running in Iowa", 11.2660332),
    vsku("Vertex AI: Online/Batch Prediction A3 Predefined Instance Core running in Iowa",
         0.0293227, "CPU"),
    vsku("Vertex AI: Online/Batch Prediction A3 Predefined Instance Ram running in Iowa",
         0.0025534, "RAM")]
# The management fees billed with flex-start VMs, a spot SKU and a disk: none is a machine
# part on demand.
NOT_PARTS = [
    vsku("Vertex AI: Training/Pipelines management fee on NVIDIA H100 80GB in Iowa", 1.4694826),
    vsku("Vertex AI: Training/Pipelines management fee on A3 Instance Core in Iowa", 0.0038247,
         "CPU"),
    vsku("Vertex AI: Training/Pipelines on NVIDIA H100 80GB in Iowa", 4.9, usage="Preemptible"),
    vsku("Vertex AI: Training/Pipelines on SSD backed PD Capacity", 0.0002678, "SSD")]
# Fixture values for A2 (no public Vertex AI A100 SKU was seen; the names follow Compute Engine's).
A2_TRAINING = [vsku("Vertex AI: Training/Pipelines on Nvidia Tesla A100 GPU running in Americas",
                    3.3741),
               vsku("Vertex AI: Training/Pipelines on A2 Instance Core running in Americas",
                    0.0363, "CPU"),
               vsku("Vertex AI: Training/Pipelines on A2 Instance Ram running in Americas",
                    0.00487, "RAM")]


def test_sku_descriptions_name_the_component_and_the_part():
    assert vertex_sku_part(A3_TRAINING[0]["description"]) == "Training|gpu:H100"
    assert vertex_sku_part(A3_TRAINING[2]["description"]) == "Training|ram:A3"
    assert vertex_sku_part(A3_PREDICTION[1]["description"]) == "Prediction|core:A3"
    assert vertex_sku_part(NOT_PARTS[0]["description"]) is None
    assert vertex_sku_part(NOT_PARTS[3]["description"]) is None
    assert vertex_sku_part("Vertex AI: Gemini 2.5 Pro Text Input") is None


def test_machines_are_composed_per_component_and_compared(tmp_path, key_file):  # noqa: F811
    cache = tmp_path / "prices.json"
    offers = Catalog.load().filter(provider="gcp", instance_types=["a2-highgpu-8g"])
    skus = [*NOT_PARTS, *A3_TRAINING, *A3_PREDICTION, *A2_TRAINING]
    with LocalServer({PATH: [ok(json.dumps({"skus": skus[:5], "nextPageToken": "p2"})),
                             ok(json.dumps({"skus": skus[5:]}))]}) as server:
        result = refresh_vertex(offers, "us-central1", key_file=key_file, cache_path=cache,
                                base_url=server.url)
    assert result.ok, result.errors
    assert [q.get("pageToken") for _, q in server.requests] == [None, "p2"]
    assert all(h["X-Goog-Api-Key"] == KEY for h in server.headers)
    [training] = result.prices  # A2 has no prediction SKUs here
    assert training.kind == "managed:vertex:training"
    assert training.per_hour == pytest.approx(96 * 0.0363 + 680 * 0.00487 + 8 * 3.3741)
    assert KEY not in cache.read_text()
    comparison = compare_managed(Catalog.load(cache_path=cache), "a2-highgpu-8g",
                                 "us-central1", cache, provider="gcp")
    assert comparison.platform == "Vertex AI" and comparison.self_managed_per_hour == 29.387
    assert comparison.managed_per_hour == pytest.approx(training.per_hour)
    assert "live, " in comparison.managed_source


def test_a3_prices_match_the_bundled_vertex_rows(tmp_path, key_file):  # noqa: F811
    offers = Catalog.load().filter(provider="gcp", instance_types=["a3-highgpu-8g"])
    with LocalServer({PATH: [ok(json.dumps({"skus": A3_TRAINING + A3_PREDICTION}))]}) as server:
        result = refresh_vertex(offers, "us-central1", key_file=key_file,
                                cache_path=tmp_path / "c.json", base_url=server.url)
    got = {p.kind: p.per_hour for p in result.prices}
    assert got == {"managed:vertex:training": pytest.approx(101.007352),
                   "managed:vertex:prediction": pytest.approx(101.007352)}


def test_a_failed_refresh_keeps_the_previous_prices_and_hides_the_key(tmp_path,
                                                                     key_file):  # noqa: F811
    from pricing.cache import CachedPrice

    cache = tmp_path / "prices.json"
    write_cache(cache, [CachedPrice("gcp", "us-central1", "a2-highgpu-8g",
                                    "managed:vertex:training", 34.0, 1e9, "earlier")])
    offers = Catalog.load().filter(provider="gcp", instance_types=["a2-highgpu-8g"])
    body = json.dumps({"error": {"code": 403, "message": f"API key {KEY} not enabled"}})
    with LocalServer({PATH: [(403, body, {})]}) as server:
        result = refresh_vertex(offers, "us-central1", key_file=key_file, cache_path=cache,
                                base_url=server.url)
    [message] = result.errors["Vertex AI"]
    assert "HTTP 403" in message and KEY not in message
    assert "check the API key and that the API is enabled" in message
    assert [p.per_hour for p in read_cache(cache)] == [34.0]


def test_a_machine_without_all_its_parts_is_named(tmp_path, key_file):  # noqa: F811
    offers = Catalog.load().filter(provider="gcp", instance_types=["g2-standard-4"])
    with LocalServer({PATH: [ok(json.dumps({"skus": A3_TRAINING}))]}) as server:
        result = refresh_vertex(offers, "us-central1", key_file=key_file,
                                cache_path=tmp_path / "c.json", base_url=server.url)
    assert result.errors == {"g2-standard-4": [
        "Vertex AI lists no on-demand SKUs for all parts of g2-standard-4 (1 x L4) in "
        "us-central1"]}
