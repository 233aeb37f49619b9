"""Fixtures for the pricing tests: an EC2 client on the session's moto server
(tests/conftest.py) and Price List responses shaped like AWS's."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from pricing.refresh import AWS_REGION_NAMES


@pytest.fixture(autouse=True)
def _fresh_catalog(fresh_catalog):
    """Every pricing test starts with the catalog cache cleared (tests/conftest.py)."""


@pytest.fixture(autouse=True)
def _fake_aws_credentials(monkeypatch):
    # Never let a test find real credentials or ask a real metadata service.
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture
def ec2_client(moto_endpoint):
    return boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_endpoint,
                        aws_access_key_id="testing", aws_secret_access_key="testing")


@pytest.fixture
def pricing_stub():
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def price_list_item(instance_type: str, region: str, usd: str, *, sku: str = "ABCDEFGHIJKLMNOP",
                    gpu: str = "1", gpu_memory: str = "24 GiB", vcpu: str = "4",
                    memory: str = "16 GiB") -> str:
    """One PriceList entry as the Price List API returns it: a JSON *string*."""
    offer = f"{sku}.JRTCKXETXF"
    rate = f"{offer}.6YS6EN2CT7"
    return json.dumps({
        "product": {
            "productFamily": "Compute Instance",
            "attributes": {
                "instanceType": instance_type, "location": AWS_REGION_NAMES[region],
                "regionCode": region, "operatingSystem": "Linux", "tenancy": "Shared",
                "preInstalledSw": "NA", "capacitystatus": "Used", "marketoption": "OnDemand",
                "licenseModel": "No License required", "vcpu": vcpu, "memory": memory,
                "gpu": gpu, "gpuMemory": gpu_memory, "servicecode": "AmazonEC2",
                "usagetype": f"BoxUsage:{instance_type}", "operation": "RunInstances",
            },
            "sku": sku,
        },
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                offer: {
                    "priceDimensions": {
                        rate: {
                            "unit": "Hrs", "endRange": "Inf", "beginRange": "0",
                            "description": f"${usd} per On Demand Linux {instance_type} "
                                           "Instance Hour",
                            "appliesTo": [], "rateCode": rate,
                            "pricePerUnit": {"USD": usd},
                        }
                    },
                    "sku": sku, "effectiveDate": "2025-06-01T00:00:00Z",
                    "offerTermCode": "JRTCKXETXF", "termAttributes": {},
                }
            }
        },
        "version": "20250601000000",
        "publicationDate": "2025-06-01T00:00:00Z",
    })


def expected_get_products(instance_type: str, region: str) -> dict:
    return {
        "ServiceCode": "AmazonEC2",
        "Filters": [
            {"Type": "TERM_MATCH", "Field": "instanceType", "Value": instance_type},
            {"Type": "TERM_MATCH", "Field": "location", "Value": AWS_REGION_NAMES[region]},
            {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Linux"},
            {"Type": "TERM_MATCH", "Field": "tenancy", "Value": "Shared"},
            {"Type": "TERM_MATCH", "Field": "preInstalledSw", "Value": "NA"},
            {"Type": "TERM_MATCH", "Field": "capacitystatus", "Value": "Used"},
        ],
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
    }


def get_products_response(*items: str) -> dict:
    return {"FormatVersion": "aws_v1", "PriceList": list(items)}
