"""Config: defaults for everything, and errors that name the key, the value and what fits."""

import re
from pathlib import Path

import pytest
import tomllib

from daemon import config
from daemon.config import ConfigError


def write(tmp_path, text):
    path = tmp_path / "mlcostd.toml"
    path.write_text(text)
    return path


def test_defaults_without_a_file():
    loaded = config.from_dict({})
    assert loaded.daemon.interval == 1.0
    assert loaded.store.raw_retention == 6 * 3600
    assert loaded.store.max_size == 1 << 30


def test_values_with_units(tmp_path):
    loaded = config.load(write(tmp_path, """
[daemon]
interval = "500ms"
[store]
raw_retention = "2h"
max_size = "256MiB"
[instance]
type = "p4d.24xlarge"
price_per_hour = 32
"""))
    assert loaded.daemon.interval == 0.5
    assert loaded.store.raw_retention == 7200
    assert loaded.store.max_size == 256 << 20
    assert loaded.instance.type == "p4d.24xlarge"
    assert loaded.instance.price_per_hour == 32.0


@pytest.mark.parametrize("text, expected", [
    ("[daemon]\nintervl = 1\n", ["[daemon].intervl", "interval, db, log_level"]),
    ("[deamon]\ninterval = 1\n", ["[deamon]", "allowed sections: daemon"]),
    ("[daemon]\ninterval = -1\n", ["[daemon].interval = -1", "between 0.1 and 60"]),
    ("[daemon]\ninterval = \"fast\"\n", ["'fast'", "not a duration"]),
    ("[store]\nmax_size = \"12 bananas\"\n", ["[store].max_size", "not a size"]),
    ("[instance]\nlifecycle = \"reserved\"\n", ["'reserved'", "'on-demand', 'spot'"]),
    ("[processes]\nchildren = \"yes\"\n", ["[processes].children", "true or false"]),
    ("[nvml]\nretry_initial = 30\nretry_max = 5\n", ["retry_max", "retry_initial"]),
    ("[daemon\n", ["not valid TOML"]),
])
def test_bad_config_names_key_value_and_allowed(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        config.load(path)
    message = str(caught.value)
    assert str(path) in message
    for part in expected:
        assert part in message


@pytest.mark.parametrize("text, says", [
    # a value as the file spells it, not as Python prints it (probe 155 L3)
    ("[daemon]\ninterval = true\n", "[daemon].interval = true: true is not a duration"),
    ("[store]\nmax_size = false\n", "[store].max_size = false: false is not a size"),
    ("[daemon]\ninterval = [1, true]\n", "[daemon].interval = [1, true]: [1, true] is not a "
                                         "duration"),
    ("[store]\nmax_size = { a = true }\n", "[store].max_size = { a = true }: { a = true } is "
                                           "not a size"),
    ("[daemon]\ninterval = 1979-05-27\n", "[daemon].interval = 1979-05-27: 1979-05-27 is not"),
    ("[daemon]\nlog_level = [\"info\"]\n", "[daemon].log_level = ['info']: must be a string"),
    ("daemon = true\n", "[daemon] must be a table, got true"),
    ("[cost.budgets.host]\ndaily = true\n", "[cost.budgets.host].daily = true: must be a number"),
    ("[[cost.unit_costs]]\ntarget = \"x\"\nurl = \"http://h/m\"\nmetric = \"m\"\nper = true\n",
     "per = true has the wrong type"),
    ("[[cost.latency]]\ntarget = \"x\"\nurl = \"http://h/m\"\nmetric = \"m\"\n"
     "labels = { a = 1 }\n", "labels = { a = 1 }: names and values must be strings"),
    # tomllib's keys, which it shows as Python tuples
    ("[daemon]\ninterval = 1\n[daemon]\nlog_level = \"info\"\n",
     "not valid TOML: Cannot declare [daemon] twice (at line 3, column 8)"),
    ("[\"a b\".c]\n[\"a b\".c]\n", "Cannot declare [\"a b\".c] twice"),
    ("x = { a = 1 }\nx.b = 2\n", "Cannot mutate immutable namespace x (at line 2"),
])
def test_config_errors_show_values_and_keys_as_toml_spells_them(tmp_path, text, says):
    """`[daemon].interval = True: True is not a duration` and `Cannot declare ('daemon',)
    twice` were Python's spellings; the file says `true` and `[daemon]`."""
    with pytest.raises(ConfigError) as caught:
        config.load(write(tmp_path, text))
    message = str(caught.value)
    assert says in message, message
    for python in ("True", "False", "{'", "('", "datetime"):
        assert python not in message, message


@pytest.mark.parametrize("text, says", [
    ("[daemon]\nlog_levle = \"debug\"\n",
     "unknown key [daemon].log_levle (did you mean log_level?); allowed keys in [daemon]: "),
    ("[deamon]\ninterval = 1\n", "unknown section [deamon] (did you mean [daemon]?); allowed "
                                 "sections: daemon, store"),
    ("[daemon]\nraw_retention = \"1h\"\n",
     "unknown key [daemon].raw_retention (did you mean [store].raw_retention?)"),
    ("[cost.budgets]\nhots = {}\n", "unknown key [cost.budgets].hots (did you mean host?)"),
    ("[cost.budgets.host]\ndayly = 5\n", "[cost.budgets.host].dayly: unknown period (did you "
                                         "mean daily?)"),
    ("[[cost.unit_costs]]\ntarget = \"x\"\nurl = \"http://h/m\"\nmetrik = \"m\"\n",
     "unknown key 'metrik' (did you mean metric?)"),
    ("[[cost.latency]]\ntarget = \"x\"\nurl = \"http://h/m\"\nlabel = {}\n",
     "unknown key 'label' (did you mean labels?)"),
])
def test_a_mistyped_key_or_section_names_the_one_meant(tmp_path, text, says):
    """As a mistyped command-line option does ("did you mean --interval?"): an unknown key
    had only the list of allowed ones (probe 155 L3)."""
    with pytest.raises(ConfigError) as caught:
        config.load(write(tmp_path, text))
    assert says in str(caught.value), str(caught.value)


def test_an_unknown_key_close_to_none_gets_no_guess(tmp_path):
    with pytest.raises(ConfigError) as caught:
        config.load(write(tmp_path, "[daemon]\nzzzq = 1\n"))
    assert "did you mean" not in str(caught.value)
    assert "unknown key [daemon].zzzq; allowed keys in [daemon]: interval" in str(caught.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.toml")


def test_described_defaults_parse_back_to_the_defaults(tmp_path):
    text = config.describe_defaults()
    assert config.load(write(tmp_path, text)) == config.Config(source=str(tmp_path / "mlcostd.toml"))


def test_cli_reports_config_errors_with_exit_2(tmp_path, capsys):
    from daemon.commands.cli import main

    path = write(tmp_path, "[store]\nraw_retention = \"forever\"\n")
    assert main(["report", "--config", str(path), "--db", str(tmp_path / "x.db")]) == 2
    err = capsys.readouterr().err
    assert "[store].raw_retention = 'forever'" in err


SIZE_FORMS = "ASCII digits and a unit, no spaces: e.g. 512MiB, 1GiB, 2GB"


@pytest.mark.parametrize("value", ["10 MB", " 10MB", "10MB ", "\uff11\uff10MB", "\u0661\u0660MB",
                                   "10MB\n", "10\u00a0MB", "10\u212aB"],
                         ids=["inner-space", "leading-space", "trailing-space",
                              "full-width-digits", "arabic-indic-digits", "newline", "nbsp",
                              "kelvin-sign-for-k"])
def test_a_size_is_ascii_digits_and_a_unit_with_no_spaces(value):
    """'10 MB' and a full-width '\uff11\uff10MB' were read as 10 MB, as durations once were."""
    assert config.parse_size("10MB") == config.parse_size("10mb") == 10_000_000
    with pytest.raises(ValueError) as refused:
        config.parse_size(value)
    assert str(refused.value) == f"{value!r} is not a size ({SIZE_FORMS})"


@pytest.mark.parametrize("value, says", [
    ("-5MB", "'-5MB' is negative: a size is a positive number and a unit (e.g. 512MiB, 1GiB)"),
    ("9" * 400 + "MB", f"'{'9' * 40}...' is too large to be a size ({SIZE_FORMS})"),
], ids=["negative", "overflows-a-float"])
def test_the_config_refuses_a_bad_size_in_one_line_not_a_traceback(tmp_path, capsys, value,
                                                                    says):
    """400 digits made float() inf and int(inf) an OverflowError: a traceback at start."""
    from daemon.commands.cli import main

    path = write(tmp_path, f'[store]\nmax_size = "{value}"\n')
    assert main(["report", "--config", str(path), "--db", str(tmp_path / "x.db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mlcostd: config error: {path}: [store].max_size = ")
    assert says in err and err.count("\n") == 1


def test_cost_sections(tmp_path):
    loaded = config.load(write(tmp_path, """
[idle]
gpu_held_after = "5m"
[cost]
jobs = { llm = "train_llm", resnet = "resnet" }
storage_paths = ["/mnt/checkpoints"]
[cost.budgets.host]
daily = 500
[[cost.unit_costs]]
target = "serve"
url = "http://127.0.0.1:8000/metrics"
metric = "vllm:generation_tokens_total"
"""))
    assert loaded.idle.gpu_held_after == 300
    assert loaded.cost.jobs["llm"] == "train_llm"
    assert loaded.cost.budgets == {"host": {"daily": 500}}
    assert config.unit_cost_setting(loaded.cost.unit_costs[0]).per == 1_000_000


@pytest.mark.parametrize("text, expected", [
    ("[cost]\njobs = { llm = \"train[\" }\n", "[cost.jobs].llm"),
    # shapes that backtrack exponentially on a command line any user writes
    ("[cost]\njobs = { evil = \"(a+)+$\" }\n", "[cost.jobs].evil = '(a+)+$': a repeat inside"),
    ("[cost]\njobs = { evil = \"(a|aa)+$\" }\n", "alternatives under a repeat"),
    ("[cost.budgets.host]\nweekly = 5\n", "unknown period"),
    # errors name the key as the file spells it: its whole section, quotes where TOML needs them
    ("[cost.budgets.host]\ndaily = \"lots\"\n",
     "mlcostd.toml: [cost.budgets.host].daily = 'lots': must be a number of dollars > 0"),
    ("[cost.budgets.user.\"ann.lee\"]\nmonthly = 0\n",
     "mlcostd.toml: [cost.budgets.user.\"ann.lee\"].monthly = 0: must be"),
    ("[cost.budgets]\nteam = 5\n", "unknown key [cost.budgets].team; allowed: host, user"),
    ("[cost]\njobs = { \"train.py\" = \"train[\" }\n", "[cost.jobs].\"train.py\" = 'train['"),
    ("[api]\n\"allow actions\" = true\n",
     "unknown key [api].\"allow actions\" (did you mean allow_actions?); allowed"),
    ("[[cost.unit_costs]]\ntarget = \"x\"\nurl = \"ftp://h\"\nmetric = \"m\"\n", "http(s) URL"),
    ("[[cost.unit_costs]]\ntarget = \"x\"\nurl = \"http://h\"\n", "metric is required"),
    ("[attribution]\nlow_sm_share = 50\nhigh_sm_share = 40\n", "high_sm_share"),
    ("[attribution]\nmid_sm_share = 35\n",
     "[attribution].mid_sm_share = 35 is not above high_sm_share = 40"),
    ("[attribution]\nmid_dump_interval = \"0s\"\n", "mid_dump_interval"),
])
def test_bad_cost_and_attribution_settings(tmp_path, text, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        config.load(write(tmp_path, text))


@pytest.mark.parametrize("table", ["unit_costs", "latency"])
@pytest.mark.parametrize("url", ["http://bob:hunter2-pw@127.0.0.1:8000/metrics",
                                 "ftp://bob:hunter2-pw@127.0.0.1:8000/metrics"])
def test_a_metrics_url_with_a_password_is_refused_without_showing_it(tmp_path, table, url):
    text = f'[[cost.{table}]]\ntarget = "x"\nurl = "{url}"\nmetric = "m"\n'
    with pytest.raises(ConfigError) as refused:
        config.load(write(tmp_path, text))
    message = str(refused.value)
    assert "hunter2" not in message and "<redacted>@127.0.0.1:8000" in message, message
    if url.startswith("http://"):
        assert "a user or password in the URL would be shown" in message, message


@pytest.mark.parametrize("text", [
    '[nvml]\ndcgm_exporter_url = "http://bob:hunter2-pw@127.0.0.1:8000/metrics"\n',
    '[pricing]\ncatalog_url = "https://bob:hunter2-pw@127.0.0.1:8000/sky"\n',
    '[cost.budgets]\nwebhook = "https://bob:hunter2-pw@127.0.0.1:8000/hook"\n',
])
def test_a_url_setting_with_a_password_is_refused_without_showing_it(tmp_path, text):
    with pytest.raises(ConfigError) as refused:
        config.load(write(tmp_path, text))
    message = str(refused.value)
    assert "hunter2" not in message and "<redacted>@127.0.0.1:8000" in message, message
    assert "a user or password in the URL would be shown" in message, message


def test_a_token_in_a_metrics_urls_query_or_an_s3_urls_credentials_are_never_echoed(tmp_path):
    """A refused URL's error printed its ?token=...; an s3://KEY:SECRET@bucket upload target
    printed the key id and secret twice."""
    text = ('[[cost.unit_costs]]\ntarget = "x"\nmetric = "m"\n'
            'url = "http://bob:pw@127.0.0.1:9/metrics?token=SUPERSECRETQ"\n')
    with pytest.raises(ConfigError) as refused:
        config.load(write(tmp_path, text))
    assert "SUPERSECRETQ" not in str(refused.value) and "127.0.0.1:9/metrics" in str(
        refused.value)
    text = '[snapshots]\nupload = "s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMIK7MDENG@bucket/p"\n'
    with pytest.raises(ConfigError) as refused:
        config.load(write(tmp_path, text))
    message = str(refused.value)
    assert "AKIAIOSFODNN7EXAMPLE" not in message and "wJalrXUtnFEMIK7MDENG" not in message
    assert "a key or secret in the URL would be shown" in message, message


def test_the_readme_config_example_is_valid():
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    example = readme.split("```toml", 1)[1].split("```", 1)[0]
    loaded = config.from_dict(tomllib.loads(example), where="README.md")
    assert loaded.cost.budgets["host"]["daily"] == 800
    assert loaded.store.max_size == 1024 << 20


def test_pricing_and_off_cloud_settings(tmp_path):
    sheet = tmp_path / "sheet.csv"
    from pricing.catalog import BUNDLED_CATALOG

    sheet.write_text(BUNDLED_CATALOG.read_text().splitlines()[0] + "\n")
    loaded = config.load(write(tmp_path, f"""
[instance]
provider = "on-prem"
purchase_price = 300000
amortization_years = 4
hosting_per_month = 1200
electricity_per_kwh = 0.14
[pricing]
cache = "/var/lib/mlcost/prices.json"
extra_catalogs = ["{sheet}"]
gcp_api_key_file = "/etc/mlcost/gcp.key"
catalog_url = "http://mirror.example/skypilot"
compare_managed = true
"""))
    assert loaded.instance.purchase_price == 300000 and loaded.instance.amortization_years == 4
    assert loaded.instance.electricity_per_kwh == 0.14
    assert loaded.pricing.extra_catalogs == [str(sheet)] and loaded.pricing.compare_managed
    assert config.price_cache_path(loaded) == Path("/var/lib/mlcost/prices.json")
    per_gpu = config.from_dict({"instance": {"price_per_gpu_hour": 2.2,
                                             "lifecycle": "commit-3y"}})
    assert per_gpu.instance.price_per_gpu_hour == 2.2 and per_gpu.instance.lifecycle == "commit-3y"


def test_the_price_cache_defaults_to_the_pricing_default(monkeypatch, tmp_path):
    monkeypatch.setenv("MLCOST_PRICE_CACHE", str(tmp_path / "env.json"))
    assert config.price_cache_path(config.from_dict({})) == tmp_path / "env.json"


@pytest.mark.parametrize("text, expected", [
    ("[instance]\nprice_per_gpu_hour = 2\npurchase_price = 100000\namortization_years = 3\n",
     ["[instance].price_per_gpu_hour = 2", "[instance].purchase_price = 100000", "exclusive"]),
    ("[instance]\nprice_per_hour = 30\nprice_per_gpu_hour = 2\n",
     ["[instance].price_per_hour = 30", "price_per_gpu_hour = 2", "keep one"]),
    ("[instance]\npurchase_price = 100000\n",
     ["purchase_price = 100000", "amortization_years > 0"]),
    ("[instance]\namortization_years = 3\n", ["amortization_years = 3", "purchase_price"]),
    ("[instance]\nhosting_per_month = 500\n", ["hosting_per_month = 500", "off-cloud price"]),
    ("[instance]\nelectricity_per_kwh = -0.1\n", ["electricity_per_kwh = -0.1", "between 0"]),
    ("[instance]\nprice_per_gpu_hour = \"cheap\"\n", ["price_per_gpu_hour = 'cheap'",
                                                      "must be a number"]),
    ("[instance]\nlifecycle = \"commit-5y\"\n", ["'commit-5y'", "'commit-3y'"]),
    ("[pricing]\ncatalog_url = \"ftp://x\"\n", ["catalog_url = 'ftp://x'", "http(s) URL"]),
    ("[pricing]\nextra_catalogs = [\"/no/such.csv\"]\n", ["/no/such.csv", "does not exist", "fix the path"]),
    ("[pricing]\nextra_catalogs = \"/one.csv\"\n", ["[pricing].extra_catalogs", "list of strings"]),
    ("[pricing]\ncompare_managed = \"yes\"\n", ["[pricing].compare_managed", "true or false"]),
    ("[pricing]\ncahce = \"x\"\n", ["[pricing].cahce", "cache, extra_catalogs"]),
])
def test_bad_pricing_settings_name_key_value_and_fix(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        config.load(path)
    message = str(caught.value)
    assert str(path) in message
    for part in expected:
        assert part in message, message


def test_an_extra_catalog_that_is_not_a_catalog_is_named(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,price\nx,1\n")
    with pytest.raises(ConfigError, match=re.escape(f"{str(bad)!r} is not a catalog CSV")):
        config.from_dict({"pricing": {"extra_catalogs": [str(bad)]}})


@pytest.mark.parametrize("store, says", [
    ({"max_size": "1KiB"}, "must be between 1MiB and 16TiB ("),
    ({"max_size": 10}, "must be between 1MiB and 16TiB ("),
])
def test_a_size_out_of_range_says_its_bounds_as_sizes_are_written(store, says):
    """Probe 149 L1: "must be between 1.04858e+06 and 1.75922e+13 bytes"."""
    with pytest.raises(ConfigError) as refused:
        config.from_dict({"store": store})
    assert says in str(refused.value) and "e+" not in str(refused.value), refused.value
