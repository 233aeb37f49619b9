"""`mlcostd prices` as the daemon's CLI runs it: the help names every refresh source, the
config's [pricing] gives the defaults (the cache the daemon reads, extra catalogs), and every
price printed says its source and age, with a warning where it cannot be trusted."""

from __future__ import annotations

import json
import time

import pytest

from daemon.commands.cli import build_parser, main
from pricing.cache import CachedPrice, write_cache
from pricing.catalog import BUNDLED_CATALOG


@pytest.fixture(autouse=True)
def _fresh_catalog(monkeypatch, tmp_path, fresh_catalog):
    monkeypatch.setenv("MLCOST_PRICE_CACHE", str(tmp_path / "default-cache.json"))


def test_the_help_lists_every_refresh_source_audit_and_managed():
    parser = build_parser()
    overview = parser.format_help()
    assert "prices" in overview and "sagemaker" in overview
    sub = next(a for a in parser._actions if a.dest == "command").choices["prices"]  # noqa: SLF001
    text = sub.format_help()
    for source in ("aws", "azure", "gcp", "catalog", "sagemaker", "vertex", "azureml"):
        assert f"\n  {source} " in text, source
    for flag in ("--audit", "--managed", "--gcp-key-file", "--catalog-url", "--cache", "--config"):
        assert flag in text


def test_pre_cut_p5_price_is_never_shown_without_a_warning(capsys):
    assert main(["prices", "--instance", "p5.48xlarge", "--region", "us-east-1"]) == 0
    out, err = capsys.readouterr()
    assert "55.0600" in out and "98.32" not in out.split("sources:")[0]
    assert "bundled, as of 2025-09-01" in out  # source and age of the price in the table
    assert "warning: aws/us-east-1/p5.48xlarge on-demand price $55.06/h may be wrong" in err
    assert "mlcostd prices --refresh aws --region us-east-1 --instance p5.48xlarge" in err


def write_config(tmp_path, text):
    path = tmp_path / "mlcostd.toml"
    path.write_text(text)
    return path


def test_the_config_cache_is_the_one_prices_reads(tmp_path, capsys):
    cache = tmp_path / "daemon-cache.json"
    write_cache(cache, [CachedPrice("aws", "us-east-1", "p5.48xlarge", "on-demand", 54.01,
                                    time.time() - 30, "test refresh")])
    config = write_config(tmp_path, f'[pricing]\ncache = "{cache}"\n')
    assert main(["prices", "--config", str(config), "--instance", "p5.48xlarge", "--region",
                 "us-east-1", "--json"]) == 0
    offer = json.loads(capsys.readouterr().out)["offers"][0]
    assert offer["on_demand"]["per_hour"] == 54.01 and offer["on_demand"]["live"]
    assert offer["on_demand"]["source"] == "test refresh"


def test_extra_catalogs_from_the_config_are_listed(tmp_path, capsys):
    sheet = tmp_path / "coreweave.csv"
    sheet.write_text(BUNDLED_CATALOG.read_text().splitlines()[0] + "\n"
                     "lambda,us-east-1,gpu_8x_h100_sheet,H100,8,80,208,1800,gpu-hour,2.99,,,,,"
                     "test sheet,2026-11-20,current,\n")
    config = write_config(tmp_path, f'[pricing]\nextra_catalogs = ["{sheet}"]\n')
    assert main(["prices", "--config", str(config), "--instance", "gpu_8x_h100_sheet"]) == 0
    out = capsys.readouterr().out
    assert "gpu_8x_h100_sheet" in out and "23.9200" in out  # 8 x 2.99 per GPU-hour
    assert "  [1] test sheet" in out.split("sources:")[1]


def test_refresh_gcp_reads_the_key_file_from_the_config(tmp_path, capsys):
    key = tmp_path / "gcp.key"
    key.write_text("not-a-real-key")
    key.chmod(0o644)  # too open: refused, and the message names the file
    config = write_config(tmp_path, f'[pricing]\ngcp_api_key_file = "{key}"\ncache = '
                                    f'"{tmp_path / "c.json"}"\n')
    code = main(["prices", "--config", str(config), "--refresh", "gcp", "--instance",
                 "a2-highgpu-1g"])
    err = capsys.readouterr().err
    assert code == 1
    assert str(key) in err and "needs an API key file" not in err


def test_json_says_stale_on_each_price_and_a_stale_price_never_reads_current(tmp_path, capsys):
    """`--json` put `stale` once per offer, and a price 460 days old read `"status":
    "current"` beside the warning about it (probe 84). Each price carries its own `stale`
    (README), and its status says `stale`; a pre-cut row stays `pre-cut`."""
    from datetime import datetime, timedelta, timezone

    # (the UTC date: a catalog's date is midnight UTC, and its age is whole days since then,
    # the same at any hour of the day and in any time zone)
    old = (datetime.now(timezone.utc).date() - timedelta(days=460)).isoformat()
    sheet = tmp_path / "old.csv"
    sheet.write_text(BUNDLED_CATALOG.read_text().splitlines()[0] + "\n"
                     "lambda,us-east-1,gpu_1x_old,A100-40GB,1,40,30,200,host-hour,1.29,0.5,0.7,"
                     f"1.0,0.8,old sheet,{old},current,\n")
    config = write_config(tmp_path, f'[pricing]\nextra_catalogs = ["{sheet}"]\n')
    assert main(["prices", "--config", str(config), "--instance", "gpu_1x_old", "--json"]) == 0
    offer = json.loads(capsys.readouterr().out)["offers"][0]
    for kind in ("on_demand", "spot", "commit_1y", "commit_3y"):
        price = offer[kind]
        assert "460 days old" in price["stale"] and price["status"] == "stale", (kind, price)
    assert offer["stale"] == offer["on_demand"]["stale"]  # the offer's, as before
    # the bundled p5 row, dated 2025-09-01: the probe's "current" price 460 days old
    assert main(["prices", "--instance", "p5.48xlarge", "--region", "us-east-1", "--json"]) == 0
    dated = json.loads(capsys.readouterr().out)["offers"][0]["on_demand"]
    assert dated["status"] == "stale" and "days old (as of 2025-09-01)" in dated["stale"]
    assert main(["prices", "--instance", "p4d.24xlarge", "--region", "us-east-1", "--json"]) == 0
    cut = json.loads(capsys.readouterr().out)["offers"][0]["on_demand"]
    assert cut["status"] == "pre-cut" and "may be wrong" in cut["stale"]


def test_a_price_age_is_said_the_same_in_the_table_the_warning_and_json(tmp_path, capsys):
    """`prices --instance p5.48xlarge` printed "461 d old" in the table and "it is 460 days
    old" in the warning: the table rounded, the warning counted whole days. A price 460.6 days
    old is 460 days old everywhere (pricing.offer.age_days)."""
    from datetime import datetime, timezone

    as_of = datetime.fromtimestamp(time.time() - 460.6 * 86400, tz=timezone.utc)
    extra = tmp_path / "extra.csv"
    extra.write_text(
        "provider,region,instance_type,accelerator,accelerator_count,accelerator_memory_gib,"
        "vcpus,memory_gib,price_unit,on_demand,spot_low,spot_high,commit_1y,commit_3y,source,"
        "as_of,status,note\n"
        "coreweave,us-east-04,gd-8xh100ib-i128,H100,8,80,128,2048,host-hour,49.24,,,,,"
        f"price sheet,{as_of.isoformat()},current,\n")
    config = tmp_path / "mlcostd.toml"
    config.write_text(f'[pricing]\nextra_catalogs = ["{extra}"]\n')
    args = ["prices", "--config", str(config), "--instance", "gd-8xh100ib-i128"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert f"as of {as_of.date().isoformat()}, 460 d old" in out
    assert "may be wrong: it is 460 days old" in err
    assert main([*args, "--json"]) == 0
    [offer] = json.loads(capsys.readouterr().out)["offers"]
    assert offer["on_demand"]["age_days"] == 460
    assert "it is 460 days old" in offer["on_demand"]["stale"]


@pytest.mark.parametrize("given, says", [
    (["--headroom", "0.2"], "--headroom goes with --fits GIB"),
    (["--limit", "3"], "--limit goes with --fits GIB or --observed"),
    (["--hours-per-month", "100"], "--hours-per-month goes with --managed"),
    (["--catalog-url", "https://mirror.example/sky"], "--catalog-url goes with --refresh catalog"),
    (["--gcp-key-file", "/nonexistent/key"],
     "--gcp-key-file goes with --refresh gcp or --refresh vertex"),
    (["--pid", "5"], "--pid goes with --observed"),
    (["--run-hours", "2"], "--run-hours goes with --observed"),
    (["--since", "2h"], "--since goes with --observed"),
    (["--until", "2026-12-01T09:30"], "--until goes with --observed"),
    (["--kind", "training"], "--kind goes with --observed"),
    (["--spot"], "--spot goes with --fits GIB"),
    (["--gpus", "2", "--spot", "--pid", "5", "--since", "1h"],
     "--gpus and --spot go with --fits GIB; --pid and --since go with --observed"),
    (["--fits", "20", "--pid", "5"], "--pid goes with --observed"),
], ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_a_flag_without_the_one_it_goes_with_is_refused_not_ignored(capsys, given, says):
    """`prices --headroom 0.2` (no --fits), `--limit` (no --fits), `--hours-per-month` (no
    --managed), `--catalog-url` (no --refresh catalog), `--pid`/`--run-hours`/`--since`/
    `--until` (no --observed) printed the whole catalog as if they were read. One table
    (pricing.cli.COMPANIONS), one message, exit 2, nothing on stdout."""
    assert main(["prices", *given]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"mlcostd prices: {says}\n"


def test_companions_with_their_flag_are_read_and_the_configs_defaults_are_no_companions(
        tmp_path, capsys):
    assert main(["prices", "--fits", "20", "--headroom", "0.5", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "(20 GiB + 50% headroom)" in out and len(out.split("\n\nsources:")[0].splitlines()) == 4
    # (exit 1: the instance's own platform, SageMaker, has no price here, and it says so)
    assert main(["prices", "--managed", "--instance", "p4d.24xlarge", "--hours-per-month",
                 "100"]) == 1
    assert "at 100 h a month:" in capsys.readouterr().out
    # [pricing].catalog_url and gcp_api_key_file are defaults for a refresh, not flags given
    config = write_config(tmp_path, '[pricing]\ncatalog_url = "https://mirror.example/sky"\n'
                                    f'gcp_api_key_file = "{tmp_path / "key"}"\n')
    assert main(["prices", "--config", str(config), "--instance", "p5.48xlarge"]) == 0
    assert "p5.48xlarge" in capsys.readouterr().out


def test_a_price_source_with_a_token_is_shown_redacted(tmp_path, capsys):
    """Probe (redaction, fourth round): an extra catalog's source (here a URL with an API key
    in its query) was printed as read by `mlcostd prices`, its table and --json; the daemon's
    command passes its redaction to the catalog it shows (pricing.catalog.Catalog.with_texts)."""
    sheet = tmp_path / "sheet.csv"
    sheet.write_text(BUNDLED_CATALOG.read_text().splitlines()[0] + "\n"
                     "lambda,us-east-1,gpu_8x_h100_sheet,H100,8,80,208,1800,gpu-hour,2.99,,,,,"
                     "https://prices.example/sheet.csv?api_key=hunter2,2026-11-20,current,"
                     "from https://bob:pw123@prices.example/\n")
    config = write_config(tmp_path, f'[pricing]\nextra_catalogs = ["{sheet}"]\n')
    for how in ([], ["--json"]):
        assert main(["prices", "--config", str(config), "--instance", "gpu_8x_h100_sheet",
                     *how]) == 0
        out, err = capsys.readouterr()
        assert "hunter2" not in out + err and "pw123" not in out + err, out + err
        assert "https://prices.example/sheet.csv?api_key=<redacted>" in out, out


def test_a_managed_price_source_with_a_token_is_shown_redacted(tmp_path, capsys):
    """`mlcostd prices --managed`: a managed price's source is the price cache's text (a file:
    here a planted URL with a key), printed as read; it goes through the daemon's redaction."""
    cache = tmp_path / "cache.json"
    write_cache(cache, [CachedPrice("aws", "us-east-1", "ml.p4d.24xlarge",
                                    "managed:sagemaker:training", 37.688, time.time() - 60,
                                    "https://prices.example/sm.json?api_key=hunter2")])
    config = write_config(tmp_path, f'[pricing]\ncache = "{cache}"\n')
    for how in ([], ["--json"]):
        main(["prices", "--config", str(config), "--managed", "--instance", "p4d.24xlarge",
              "--region", "us-east-1", *how])
        out, err = capsys.readouterr()
        assert "hunter2" not in out + err, out + err
        assert "api_key=<redacted>" in out, out


def test_a_catalog_url_with_a_token_is_shown_redacted_by_a_refresh_and_by_check(tmp_path, capsys):
    """[pricing].catalog_url may carry a token in its query (`?token=...`: the mirror's to
    read, not a screen's to show): `mlcostd prices --refresh catalog` printed it where it said
    what it fetched and why that failed (text and --json), and `mlcostd check` printed the
    failed refresh's error the price cache recorded, URL and all. Nothing listens on port 9
    of 127.0.0.1 here: the fetch fails at once."""
    from daemon.commands.check import check_refreshes

    cache = tmp_path / "cache.json"
    config = write_config(tmp_path, f'[pricing]\ncache = "{cache}"\n'
                                    'catalog_url = "http://127.0.0.1:9/sky?token=hunter2"\n')
    for how in ([], ["--json"]):
        main(["prices", "--config", str(config), "--refresh", "catalog", "--provider", "aws",
              *how])
        out, err = capsys.readouterr()
        assert "127.0.0.1:9" in out + err and "token=<redacted>" in out + err, out + err
        assert "hunter2" not in out + err, out + err
    found = check_refreshes(cache)
    assert found and "token=<redacted>" in found[0].detail, found
    assert "hunter2" not in found[0].detail + found[0].fix
