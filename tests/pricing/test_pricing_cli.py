from __future__ import annotations

import argparse
import io
import json

from conftest import expected_get_products, get_products_response, price_list_item

from pricing import cli


def run(*argv: str, **clients) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="mlcostd prices")
    cli.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(parser.parse_args(list(argv)), out=out, err=err, **clients)
    return code, out.getvalue(), err.getvalue()


def test_table_of_the_whole_catalog(tmp_path):
    code, out, err = run("--cache", str(tmp_path / "c.json"))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["PROVIDER", "REGION", "INSTANCE"]
    assert len(lines) == 62
    assert "bundled, catalog date unknown" in out


def test_filters(tmp_path):
    code, out, _ = run("--cache", str(tmp_path / "c.json"), "--provider", "azure",
                       "--accelerator", "a100")
    assert code == 0
    rows = out.splitlines()[1:]
    assert len(rows) == 4 and all(r.startswith("azure") for r in rows)
    code, out, _ = run("--cache", str(tmp_path / "c.json"), "--instance", "P4D.24XLARGE")
    assert code == 0 and len(out.splitlines()) == 2 and "4.0966" in out  # $/GPU-h


def test_fits_json(tmp_path):
    code, out, _ = run("--cache", str(tmp_path / "c.json"), "--fits", "20", "--provider", "aws",
                       "--json")
    data = json.loads(out)
    assert code == 0
    assert data["offers"][0]["instance_type"] == "g6.xlarge"
    assert data["offers"][0]["on_demand"]["describe"] == "bundled, catalog date unknown"
    assert data["fits"] == {"gpu_memory_gib": 20.0, "gpus": 1, "headroom": 0.1, "spot": False}


def test_fits_spot_multi_gpu_table(tmp_path):
    code, out, _ = run("--cache", str(tmp_path / "c.json"), "--fits", "70", "--gpus", "8",
                       "--spot", "--provider", "aws")
    assert code == 0
    assert out.splitlines()[0].startswith("cheapest spot instances with >= 8 accelerator(s)")
    assert out.splitlines()[2].split()[2] == "p4de.24xlarge"


def test_usage_errors(tmp_path):
    cache = str(tmp_path / "c.json")
    code, _, err = run("--cache", cache, "--provider", "oracle")
    assert code == 2 and "unknown provider 'oracle'; known: aws, azure, gcp, lambda" in err
    code, _, err = run("--cache", cache, "--gpus", "2")
    assert code == 2 and "--gpus and --spot go with --fits GIB" in err
    code, _, err = run("--cache", cache, "--accelerator", "B300")
    assert code == 2 and "known: A10, A100-40GB" in err
    code, out, err = run("--cache", cache, "--instance", "p9.48xlarge")
    assert code == 2 and "no price for aws/p9.48xlarge; known AWS GPU types" in err
    code, out, _ = run("--cache", cache, "--fits", "500")
    assert code == 0 and "no instance fits 500 GiB" in out


def test_refresh_prints_progress_then_live_and_bundled(tmp_path, pricing_stub, ec2_client):
    client, stubber = pricing_stub
    stubber.add_response("get_products", get_products_response(
        price_list_item("g5.xlarge", "us-east-1", "1.0060000000")),
        expected_get_products("g5.xlarge", "us-east-1"))
    stubber.add_response("get_products", get_products_response(),
                         expected_get_products("p9.48xlarge", "us-east-1"))
    code, out, err = run("--cache", str(tmp_path / "c.json"), "--refresh", "aws", "--region",
                         "us-east-1", "--instance", "g5.xlarge", "p9.48xlarge",
                         pricing_client=client, ec2_client=ec2_client)
    assert code == 1  # p9.48xlarge failed
    assert "refreshing 2 AWS instance type(s) in us-east-1" in out
    assert "  g5.xlarge: on-demand $1.0060/h" in out
    assert "  p9.48xlarge: on-demand unknown" in out
    assert "AWS lists no Linux on-demand price for p9.48xlarge" in err
    table = out.split("cached in")[1]
    row = next(line for line in table.splitlines() if "g5.xlarge" in line)
    assert "live, " in row and " s old" in row
    code, out, _ = run("--cache", str(tmp_path / "c.json"), "--provider", "aws")
    assert "bundled, catalog date unknown" in out and "live, " in out
