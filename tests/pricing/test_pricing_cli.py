from __future__ import annotations

import argparse
import io
import json
import re

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
    assert code == 0
    assert err.startswith("warning: 64 of 64 prices shown are stale (date unknown, older than "
                          "90 days, or from before a price cut); run `mlcostd prices --refresh "
                          "catalog`")
    table, sources = out.split("\n\nsources:\n")
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["PROVIDER", "REGION", "INSTANCE"]
    assert len(lines) == 65
    assert "bundled, catalog date unknown" in out
    assert len(sources.splitlines()) == len({ref for ref in re.findall(r"\[(\d+)\]", table)})


def test_filters(tmp_path):
    code, out, _ = run("--cache", str(tmp_path / "c.json"), "--provider", "azure",
                       "--accelerator", "a100")
    assert code == 0
    rows = out.split("\n\n")[0].splitlines()[1:]
    assert len(rows) == 4 and all(r.startswith("azure") for r in rows)
    assert rows[0].endswith("bundled, catalog date unknown [1]")
    assert out.split("\n\nsources:\n")[1].splitlines()[0] == (
        "  [1] SkyPilot catalogs/v6/azure/vms.csv @098741e7")
    code, out, _ = run("--cache", str(tmp_path / "c.json"), "--instance", "P4D.24XLARGE")
    assert code == 0 and len(out.split("\n\n")[0].splitlines()) == 2 and "4.0966" in out


def test_an_instance_without_a_row_says_why_and_draws_no_empty_table(tmp_path):
    """`--instance p4d.24xlarge --region mars-1` printed "no instance matches the given
    filters" and exited 0; `--instance nope` printed that line too, then the reason."""
    cache = str(tmp_path / "c.json")
    code, out, err = run("--cache", cache, "--instance", "p4d.24xlarge", "--region", "mars-1")
    assert code == 2 and out == ""
    assert "no price for aws/p4d.24xlarge in mars-1; known in: us-east-1" in err
    code, out, err = run("--cache", cache, "--instance", "p4d.24xlarge", "--accelerator", "H100")
    assert code == 2 and out == "" and "p4d.24xlarge has A100-40GB, not H100" in err
    code, out, err = run("--cache", cache, "--instance", "p4d.24xlarge", "--instance",
                         "p9.48xlarge")
    assert code == 2 and "p4d.24xlarge" in out.splitlines()[1]  # the one found: its row
    assert "no price for aws/p9.48xlarge" in err and "no price for aws/p4d" not in err
    # A region with no prices at all is a usage error, as an unknown provider is.
    code, out, err = run("--cache", cache, "--region", "mars-1")
    assert code == 2 and out == ""
    assert err.startswith("mlcostd prices: no prices in region 'mars-1'; regions with prices: ")
    assert "us-east-1" in err
    code, out, err = run("--cache", cache, "--region", "mars-1", "--json")
    assert code == 2 and out == "" and "no prices in region 'mars-1'" in err


def test_fits_json(tmp_path):
    code, out, _ = run("--cache", str(tmp_path / "c.json"), "--fits", "20", "--provider", "aws",
                       "--json")
    data = json.loads(out)
    assert code == 0
    assert data["offers"][0]["instance_type"] == "g6.xlarge"
    assert data["offers"][0]["on_demand"]["describe"] == "bundled, catalog date unknown"
    assert data["fits"] == {"gpu_memory_gib": 20.0, "gpus": 1, "headroom": 0.1, "spot": False}


def test_fits_reads_a_size_with_its_unit(tmp_path):
    """--fits 70GiB (or 70G, 70GB: GPU memory is sold in GiB called GB) is 70 GiB, 512MiB
    half a GiB; a unit it does not know is refused with what it takes."""
    cache = str(tmp_path / "c.json")
    for given, gib in (("70GiB", 70.0), ("70 G", 70.0), ("80GB", 80.0), ("512MiB", 0.5),
                       ("1.5TiB", 1536.0), ("1e1gib", 10.0)):
        code, out, _ = run("--cache", cache, "--fits", given, "--json")
        assert code == 0 and json.loads(out)["fits"]["gpu_memory_gib"] == gib, given
    parser = argparse.ArgumentParser(prog="mlcostd prices")
    cli.add_arguments(parser)
    for bad in ("70XB", "GiB", "inf", "-1G"):
        try:
            parser.parse_args(["--fits", bad])
        except SystemExit as exit_:
            assert exit_.code == 2
        else:
            raise AssertionError(f"--fits {bad} was taken")


def test_fits_spot_multi_gpu_table(tmp_path):
    code, out, _ = run("--cache", str(tmp_path / "c.json"), "--fits", "70", "--gpus", "8",
                       "--spot", "--provider", "aws")
    assert code == 0
    assert out.splitlines()[0].startswith("cheapest spot instances with >= 8 accelerators")
    assert out.splitlines()[2].split()[2] == "p4de.24xlarge"


def test_usage_errors(tmp_path):
    cache = str(tmp_path / "c.json")
    code, _, err = run("--cache", cache, "--provider", "oracle")
    assert code == 2 and "unknown provider 'oracle'; known: aws, azure, gcp, lambda" in err
    code, _, err = run("--cache", cache, "--gpus", "2")
    assert code == 2 and err == "mlcostd prices: --gpus goes with --fits GIB\n"
    code, _, err = run("--cache", cache, "--accelerator", "B300")
    assert code == 2 and "known: A10, A100-40GB" in err
    code, out, err = run("--cache", cache, "--instance", "p9.48xlarge")
    assert code == 2 and "no price for aws/p9.48xlarge; known AWS GPU types" in err
    code, out, _ = run("--cache", cache, "--fits", "500")
    assert code == 0 and "no instance fits 500 GiB" in out
    # a user and password would be kept with each price as its source: refused, not echoed
    code, out, err = run("--cache", cache, "--refresh", "catalog", "--catalog-url",
                         "https://bob:hunter2-pw@mirror.example/sky")
    assert code == 2 and "--catalog-url has a user or password in it" in err
    assert "hunter2" not in out + err


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
    assert "refreshing 2 AWS instance types in us-east-1" in out
    assert (f"2 live prices fetched and cached in {tmp_path / 'c.json'}; the failed ones keep "
            "their previous prices") in out
    assert "  g5.xlarge: on-demand $1.0060/h" in out
    assert "  p9.48xlarge: on-demand unknown" in out
    assert "AWS lists no Linux on-demand price for p9.48xlarge" in err
    table = out.split("cached in")[1]
    row = next(line for line in table.splitlines() if "g5.xlarge" in line)
    assert "live, " in row and " s old" in row
    code, out, _ = run("--cache", str(tmp_path / "c.json"), "--provider", "aws")
    assert "bundled, catalog date unknown" in out and "live, " in out


def test_audit_lists_rejections_with_reasons(tmp_path):
    from pricing.cache import CachedPrice, write_cache

    cache = tmp_path / "c.json"
    write_cache(cache, [CachedPrice("aws", "us-east-1", "p5.48xlarge", "spot", 55.06, 1e9, "x")])
    code, out, _ = run("--cache", str(cache), "--audit")
    assert code == 0
    assert out.splitlines() == [
        "1 price or row left out by the sanity rules:",
        "  aws/us-east-1/p5.48xlarge: spot price $55.06/h left out (spot-not-below-on-demand): "
        "spot $55.06/h is not below on-demand $55.06/h (a placeholder); spot unknown"]
    code, out, _ = run("--cache", str(tmp_path / "none.json"), "--audit", "--json")
    assert json.loads(out) == {"rejections": []}


def test_one_instance_warns_with_the_refresh_command(tmp_path):
    code, out, err = run("--cache", str(tmp_path / "c.json"), "--instance", "p5.48xlarge",
                         "--region", "us-east-1")
    assert code == 0 and "bundled, as of 2025-09-01" in out
    assert err.startswith("warning: aws/us-east-1/p5.48xlarge on-demand price $55.06/h may be "
                          "wrong: it is ")
    assert err.rstrip().endswith("run `mlcostd prices --refresh aws --region us-east-1 "
                                 "--instance p5.48xlarge`")


def test_managed_markup_for_the_demo_host(tmp_path, pricing_stub):
    from test_pricing_managed import expected, sagemaker_item

    client, stubber = pricing_stub
    stubber.add_response("get_products", get_products_response(
        sagemaker_item("ml.p4d.24xlarge", "us-east-1", "37.6880000000")),
        expected("ml.p4d.24xlarge"))
    cache = str(tmp_path / "c.json")
    code, out, err = run("--cache", cache, "--refresh", "sagemaker", "--instance",
                         "p4d.24xlarge", pricing_client=client)
    assert code == 0, err
    # a managed refresh shows the managed view of the types it fetched, not the EC2 table
    assert "  SageMaker Training ml.p4d.24xlarge $37.6880/h" in out and "PROVIDER" not in out
    code, out, err = run("--cache", cache, "--managed", "--instance", "p4d.24xlarge", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["hardware"] == "8 x A100-40GB" and document["missing"] == []
    rows = {(r["platform"], r["component"]): r for r in document["managed"]}
    assert list(rows) == [("SageMaker", "Training"), ("Vertex AI", "Training"),
                          ("Vertex AI", "Prediction"), ("Azure ML", "Training"),
                          ("Azure ML", "Inference")]
    sagemaker = rows[("SageMaker", "Training")]
    assert (sagemaker["markup_pct"], sagemaker["monthly_difference"]) == (15.0, 3588.24)
    assert rows[("Azure ML", "Training")]["markup_pct"] == 0.0
    # every price printed says its source and age
    code, out, err = run("--cache", cache, "--managed", "--instance", "p4d.24xlarge",
                         "--hours-per-month", "365")
    lines = out.splitlines()
    assert lines[0] == ("managed vs self-managed, the hardware of aws/p4d.24xlarge "
                        "(8 x A100-40GB) at 365 h a month:")
    assert lines[1].startswith("  SageMaker Training ml.p4d.24xlarge $37.6880/h against "
                               "p4d.24xlarge $32.7726/h self-managed in us-east-1: +15.0 %, "
                               "$1,794 a month at 365 h")
    assert lines[2].startswith("    managed: AWS Price List API (AmazonSageMaker) (live, ")
    assert lines[3].endswith("(bundled, catalog date unknown, predates a price cut)")
    sources = [line for line in lines if line.startswith(("    managed:", "    self-managed:"))]
    assert len(sources) == 10 and all(("live, " in line or "bundled, " in line)
                                      for line in sources)
    code, out, err = run("--cache", str(tmp_path / "empty.json"), "--managed", "--instance",
                         "p4d.24xlarge")
    assert code == 1 and "run `mlcostd prices --refresh sagemaker" in err
    assert "Vertex AI Training a2-highgpu-8g" in out  # the bundled rows still show
    code, _, err = run("--cache", cache, "--managed")
    assert code == 2 and "--managed needs --instance TYPE" in err


def test_refresh_azure_and_catalog_through_the_cli(tmp_path, monkeypatch):
    from local_http import LocalServer, ok
    from test_pricing_refresh_azure import PATH, SKU, item, page
    from test_pricing_refresh_catalog import LAMBDA_CSV

    import pricing.refresh_azure as azure

    cache = str(tmp_path / "c.json")
    with LocalServer({PATH: [ok(page([item("NC24ads A100 v4", 3.5)], None))],
                      "/v7/lambda/vms.csv": [ok(LAMBDA_CSV.replace("2.49", "2.39"))]}) as server:
        monkeypatch.setattr(azure, "AZURE_PRICES_URL", server.url + PATH)
        code, out, err = run("--cache", cache, "--refresh", "azure", "--instance", SKU)
        assert code == 0, err
        assert f"  {SKU}: on-demand $3.5000/h" in out
        code, out, err = run("--cache", cache, "--refresh", "catalog", "--provider", "lambda",
                             "--catalog-url", server.url, "--instance", "gpu_1x_h100_pcie")
        assert code == 0, err
    row = next(line for line in out.splitlines() if "gpu_1x_h100_pcie" in line)
    assert "2.3900" in row and "live, " in row


def test_refresh_gcp_without_a_key_file_says_how(tmp_path, monkeypatch):
    monkeypatch.delenv("MLCOST_GCP_API_KEY_FILE", raising=False)
    code, _, err = run("--cache", str(tmp_path / "c.json"), "--refresh", "gcp")
    assert code == 1
    assert "--refresh gcp needs an API key file: pass --gcp-key-file FILE" in err
    key = tmp_path / "k"
    key.write_text("secret-key")
    key.chmod(0o640)
    code, _, err = run("--cache", str(tmp_path / "c.json"), "--refresh", "gcp",
                       "--gcp-key-file", str(key))
    assert code == 1 and f"run `chmod 600 {key}`" in err and "secret-key" not in err


def test_a_failed_refresh_is_recorded_and_the_previous_prices_stay(tmp_path, monkeypatch):
    from local_http import LocalServer
    from test_pricing_refresh_azure import PATH, SKU

    import pricing.refresh_azure as azure
    from pricing.cache import CachedPrice, read_cache, read_refresh_log, write_cache

    cache = tmp_path / "c.json"
    write_cache(cache, [CachedPrice("azure", "eastus", SKU, "on-demand", 3.6, 1e9, "earlier")])
    with LocalServer({PATH: [(503, "upstream down", {})]}) as server:
        monkeypatch.setattr(azure, "AZURE_PRICES_URL", server.url + PATH)
        code, out, err = run("--cache", str(cache), "--refresh", "azure", "--instance", SKU)
    assert code == 1
    assert "HTTP 503: upstream down; check the URL and region (previous prices kept)" in err
    assert f"no live price fetched; the 1 price already cached in {cache} stays as it was" in out
    assert [p.per_hour for p in read_cache(cache)] == [3.6]
    record = read_refresh_log(cache)["azure"]
    assert not record.ok and record.fetched == 0 and "HTTP 503" in record.errors[0]


def test_accelerator_accepts_the_name_the_screen_and_nvml_show(tmp_path):
    cache = str(tmp_path / "c.json")
    _, by_catalog_name, _ = run("--cache", cache, "--accelerator", "A100-40GB")
    for name in ("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "nvidia a100-pcie-40gb"):
        code, out, err = run("--cache", cache, "--accelerator", name)
        assert code == 0, err
        assert out == by_catalog_name
    code, out, _ = run("--cache", cache, "--accelerator", "NVIDIA H100 80GB HBM3")
    rows = out.split("\n\n")[0].splitlines()[1:]
    assert code == 0 and rows and all(r.split()[3] == "H100" for r in rows)
    code, out, _ = run("--cache", cache, "--accelerator", "NVIDIA A100 80GB PCIe")
    assert code == 0 and all(r.split()[3] == "A100-80GB"
                             for r in out.split("\n\n")[0].splitlines()[1:])
    code, _, err = run("--cache", cache, "--accelerator", "NVIDIA GH200 480GB")
    assert code == 2 and "'NVIDIA GH200 480GB'" in err and "NVIDIA A100-SXM4-40GB" in err


def test_a_refresh_that_fetched_nothing_says_nothing_was_cached(tmp_path, pricing_stub,
                                                                ec2_client):
    client, stubber = pricing_stub
    stubber.add_response("get_products", get_products_response(),
                         expected_get_products("p9.48xlarge", "us-east-1"))
    cache = tmp_path / "c.json"
    code, out, _ = run("--cache", str(cache), "--refresh", "aws", "--instance", "p9.48xlarge",
                       pricing_client=client, ec2_client=ec2_client)
    assert code == 1
    assert "refreshing 1 AWS instance type in us-east-1" in out
    assert f"no live price fetched; nothing is cached yet (cache: {cache})" in out
    assert "cached in" not in out


def test_refresh_azureml_then_the_managed_view_of_an_azure_size(tmp_path, monkeypatch):
    from local_http import LocalServer, ok
    from test_pricing_refresh_azure import PATH, page
    from test_pricing_refresh_azureml import SURCHARGES

    import pricing.refresh_azure as azure

    cache = str(tmp_path / "c.json")
    with LocalServer({PATH: [ok(page(SURCHARGES, None))]}) as server:
        monkeypatch.setattr(azure, "AZURE_PRICES_URL", server.url + PATH)
        code, out, err = run("--cache", cache, "--refresh", "azureml")
    assert code == 0, err
    assert "refreshing Azure ML surcharges in eastus ..." in out
    assert "  inference per-GPU: $0.11/h" in out
    assert f"4 live prices fetched and cached in {cache}" in out
    assert "PROVIDER" not in out and "managed vs" not in out  # no --instance: nothing more
    code, out, err = run("--cache", cache, "--managed", "--instance", "ND96asr_v4")
    assert "Azure ML Inference Standard_ND96asr_v4 $28.0770/h against Standard_ND96asr_v4 " \
           "$27.1970/h self-managed in eastus: +3.2 %" in out
    assert "Vertex AI Training a2-highgpu-8g" in out


def test_every_price_in_the_table_says_its_source_and_age(tmp_path):
    from pricing.cache import CachedPrice, write_cache

    cache = tmp_path / "c.json"
    write_cache(cache, [CachedPrice("aws", "us-east-1", "g5.xlarge", "on-demand", 1.0, 1e9,
                                    "AWS Price List API", url="https://pricing.example")])
    code, out, _ = run("--cache", str(cache), "--provider", "aws")
    table, sources = out.split("\n\nsources:\n")
    rows = table.splitlines()[1:]
    assert code == 0 and len(rows) == 37  # the bundled AWS rows
    notes = sources.splitlines()
    for row in rows:
        for ref in re.findall(r"\[(\d+)\]", row):
            assert 1 <= int(ref) <= len(notes)
        assert re.search(r"(bundled|live)[^\[]*\[\d+\]", row), row
    g5 = next(r for r in rows if " g5.xlarge " in r)
    # live on-demand, bundled spot: each says its own
    assert re.search(r"on-demand: live, \d+ d old \[(\d+)\]; spot: bundled, catalog date "
                     r"unknown \[\d+\]$", g5), g5
    assert "  [2] AWS Price List API (https://pricing.example)" in notes or any(
        n.endswith("] AWS Price List API (https://pricing.example)") for n in notes)


def test_a_refresh_refuses_another_providers_instance_type_and_names_its_provider(tmp_path):
    """Probe 84: `--refresh azure --instance p4d.24xlarge` asked Azure for
    'Standard_p4d.24xlarge'. An instance type the catalog lists under another provider is
    refused before any request, exit 2, with the provider it belongs to and its refresh."""
    cache = str(tmp_path / "c.json")
    code, out, err = run("--cache", cache, "--refresh", "azure", "--instance", "p4d.24xlarge")
    assert code == 2 and "refreshing" not in out
    assert "p4d.24xlarge is an AWS instance type, not an Azure size" in err
    assert "for p4d.24xlarge use --refresh aws" in err
    code, _, err = run("--cache", cache, "--refresh", "vertex", "--instance", "p4d.24xlarge")
    assert code == 2 and "not a GCP machine type: --refresh vertex fetches Vertex AI" in err
    assert "use --refresh sagemaker" in err  # a managed refresh points at the managed one
    code, _, err = run("--cache", cache, "--refresh", "sagemaker", "--instance",
                       "Standard_ND96asr_v4")
    assert code == 2 and "Standard_ND96asr_v4 is an Azure size, not an AWS instance type" in err
    assert "use --refresh azureml" in err
    code, _, err = run("--cache", cache, "--refresh", "gcp", "--instance", "p4d.24xlarge")
    assert code == 2 and "is an AWS instance type, not a GCP machine type" in err
    assert not list(tmp_path.iterdir())  # nothing fetched, nothing cached


def test_a_failed_managed_refresh_says_what_to_check_not_to_run_itself_again(tmp_path,
                                                                             pricing_stub):
    """Probe 84: a failed `--refresh sagemaker` ended 'run `mlcostd prices --refresh
    sagemaker …`', the command just run; `--refresh vertex` and `--refresh azureml` printed
    that same SageMaker line. After a refresh, what is missing is said of its own service."""
    client, stubber = pricing_stub
    stubber.add_client_error("get_products", service_error_code="AccessDeniedException",
                             service_message="denied", http_status_code=400)
    code, _, err = run("--cache", str(tmp_path / "c.json"), "--refresh", "sagemaker",
                       "--instance", "p4d.24xlarge", pricing_client=client)
    assert code == 1, err
    assert "SageMaker: no price for p4d.24xlarge (8 x A100-40GB); the refresh failed" in err
    assert "check the network, proxy and credentials" in err
    assert "run `mlcostd prices --refresh sagemaker" not in err
    code, _, err = run("--cache", str(tmp_path / "c.json"), "--refresh", "vertex",
                       "--instance", "a2-highgpu-8g", "--gcp-key-file", str(tmp_path / "none"))
    assert code == 1 and "SageMaker" not in err, err
    assert "Vertex AI" in err  # its own failure, under its own name
