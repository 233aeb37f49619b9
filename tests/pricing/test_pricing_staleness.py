from __future__ import annotations

from datetime import datetime, timezone

from pricing.catalog import Catalog, Price
from pricing.staleness import STALE_AFTER_DAYS, price_staleness, refresh_command

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc).timestamp()


def dated(days_old: float, **kw) -> Price:
    as_of = datetime.fromtimestamp(NOW - days_old * 86400, tz=timezone.utc)
    return Price(2.0, "on-demand", "test", as_of, False, **kw)


def test_threshold_is_90_days():
    assert STALE_AFTER_DAYS == 90
    assert not price_staleness(dated(89), "aws", now=NOW).stale
    verdict = price_staleness(dated(91), "aws", "us-east-1", "g5.xlarge", now=NOW)
    assert verdict.stale and verdict.reason == "older-than-threshold"
    assert verdict.message == (
        "aws/us-east-1/g5.xlarge on-demand price $2/h may be wrong: it is 91 days old (as of "
        "2026-09-01), older than 90 days; run `mlcostd prices --refresh aws --region us-east-1 "
        "--instance g5.xlarge`")


def test_unknown_date_pre_cut_and_estimate_are_stale():
    catalog = Catalog.load()
    p4d = catalog.by_instance("aws", "p4d.24xlarge")
    verdict = price_staleness(p4d.on_demand, "aws", p4d.region, p4d.instance_type, now=NOW)
    assert verdict.reason == "predates-cut" and "June 2025" in verdict.message
    g2 = catalog.by_instance("gcp", "g2-standard-4")
    assert price_staleness(g2.on_demand, "gcp", now=NOW).reason == "date-unknown"
    a2 = catalog.by_instance("gcp", "a2-ultragpu-8g")
    assert price_staleness(a2.on_demand, "gcp", now=NOW).reason == "estimate"
    p5 = catalog.by_instance("aws", "p5.48xlarge")
    assert price_staleness(p5.on_demand, "aws", now=NOW).reason == "older-than-threshold"
    fresh = Price(1.0, "on-demand", "live", datetime.fromtimestamp(NOW - 60, tz=timezone.utc), True)
    assert price_staleness(fresh, "aws", now=NOW).stale is False
    missing = price_staleness(None, "azure", "eastus", now=NOW)
    assert missing.stale and missing.message == (
        "no price for azure/eastus; run `mlcostd prices --refresh azure --region eastus`")


def test_refresh_command_per_provider():
    assert refresh_command("gcp") == "mlcostd prices --refresh gcp"
    assert refresh_command("lambda", "us-east-1") == (
        "mlcostd prices --refresh catalog --provider lambda --region us-east-1")
    assert refresh_command("coreweave") == "mlcostd prices --refresh catalog --provider coreweave"


def test_offer_staleness_looks_the_price_up_like_the_cost_model():
    from pricing.staleness import offer_staleness

    catalog = Catalog.load()
    verdict = offer_staleness(catalog, "aws", "p4d.24xlarge", "us-east-1", now=NOW)
    assert verdict.stale and verdict.reason == "predates-cut"
    assert verdict.refresh_command == ("mlcostd prices --refresh aws --region us-east-1 "
                                       "--instance p4d.24xlarge")
    # a region the catalog lacks: the reference region's price, refreshed for the asked region
    west = offer_staleness(catalog, "aws", "g5.xlarge", "eu-west-1", now=NOW)
    assert west.reason == "date-unknown" and "--region eu-west-1" in west.refresh_command
    unknown = offer_staleness(catalog, "aws", "p9.48xlarge", now=NOW)
    assert unknown.message.startswith("no price for aws/p9.48xlarge")
