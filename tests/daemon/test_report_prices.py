"""`mlcostd report` on prices: the price warning (host.price_warning), the energy of the GPUs'
measured power at [instance].electricity_per_kwh, and the managed-vs-self-managed review."""

from __future__ import annotations

import dataclasses
import sqlite3
import time

import pytest

from daemon import config as config_module
from daemon.commands import report
from daemon.report_html import data as report_html
from daemon.report_html.render import render as render_page
from daemon.runtime import price_host
from daemon.sources.sample import GpuSample, Sample
from daemon.store.reader import StoreReader
from daemon.store.writer import Store
from daemon.wire import Now
from pricing.cache import CachedPrice, write_cache

P4D = {"provider": "aws", "type": "p4d.24xlarge", "region": "us-east-1"}


pytestmark = pytest.mark.usefixtures("fresh_catalog")  # tests/conftest.py


def make_config(tmp_path, **sections):
    sections.setdefault("pricing", {})["cache"] = str(tmp_path / "prices.json")
    return config_module.from_dict(sections, where="test")


def record(tmp_path, config, watts=(300.0, 100.0), ticks=11):
    """A store of `ticks` 1 s samples of two GPUs drawing `watts`, priced as the daemon would."""
    price, _, instance = price_host.price_host(config, None, 2)
    db = tmp_path / "mlcost.db"
    store = Store(str(db))
    start = time.time() - ticks
    for i in range(ticks):
        gpus = tuple(GpuSample(n, f"GPU-{n}", "A100", utilization=50.0, power_watts=w,
                               memory_used_bytes=1 << 30, memory_total_bytes=40 << 30)
                     for n, w in enumerate(watts))
        store.write(Sample(ts=start + i, tick=i + 1, gpus=gpus))
    store.set_meta("host", {"hostname": "box", "interval_s": 1.0, "price": price.as_dict(),
                            "instance": instance})
    store.close()
    return db


def two_runs(tmp_path, first, second, ticks, between=None, models=("A100", "A100")):
    """A store of `ticks` 1 s ticks of two GPUs, the first half charged at `first`, the second
    at `second` (each recorded as a start records its price; `between(store, ts)` writes more
    at the change), the GPUs of each half the model of `models` (40 GiB; "H100": 80 GiB), its
    meta the second's, as the last run leaves it; returns it and its first tick's time."""
    from daemon.runtime.resume import record_price

    db = tmp_path / "mlcost.db"
    start = time.time() - ticks
    with Store(str(db)) as store:
        record_price(store, first, start - 1)
        for i in range(ticks):
            if i == ticks // 2:
                record_price(store, second, start + i - 0.5)
                if between is not None:
                    between(store, start + i)
            model = models[i >= ticks // 2]
            gpus = tuple(GpuSample(n, f"GPU-{model}-{n}", model, utilization=50.0,
                                   power_watts=100.0, memory_used_bytes=1 << 30,
                                   memory_total_bytes=(80 if model == "H100" else 40) << 30)
                         for n in range(2))
            store.write(Sample(ts=start + i, tick=i + 1, gpus=gpus))
        store.set_meta("host", {"hostname": "box", "interval_s": 1.0,
                                "price": second.as_dict(),
                                "instance": {"provider": "aws", "type": second.instance_type}})
    return db, start


def build(db, config):
    reader = StoreReader(str(db))
    try:
        return report.build(reader, 300.0, config=config)
    finally:
        reader.close()


def test_a_pre_cut_price_warns_in_json_and_text(tmp_path):
    config = make_config(tmp_path, instance=P4D)
    document = build(record(tmp_path, config), config)
    warning = document["host"]["price_warning"]
    assert warning["reason"] == "predates-cut"
    assert warning["refresh_command"] == ("mlcostd prices --refresh aws --region us-east-1 "
                                          "--instance p4d.24xlarge")
    text = report.render_text(document)
    assert "warning: aws/us-east-1/p4d.24xlarge on-demand price $32.7726/h may be wrong" in text
    assert f"  run: {warning['refresh_command']}\n" in text  # whole, to be copied
    # no electricity price: no energy cost line (the kWh and carbon line is not a cost)
    assert document["energy"] is None and "energy: $" not in text


def test_a_fresh_price_has_no_warning(tmp_path):
    write_cache(tmp_path / "prices.json", [CachedPrice(
        "aws", "us-east-1", "p4d.24xlarge", "on-demand", 21.96, time.time(), "refresh")])
    config = make_config(tmp_path, instance=P4D)
    document = build(record(tmp_path, config), config)
    assert document["host"]["price_warning"] is None
    assert "warning:" not in report.render_text(document)


def test_measured_power_is_priced_beside_the_burn(tmp_path):
    config = make_config(tmp_path, instance={"price_per_gpu_hour": 1.0,
                                             "electricity_per_kwh": 0.2})
    document = build(record(tmp_path, config, watts=(300.0, 100.0)), config)
    energy = document["energy"]
    assert energy["electricity_per_kwh"] == 0.2
    assert energy["energy_per_hour"] == pytest.approx(0.4 * 0.2)  # 400 W for an hour at $0.2
    assert energy["by_gpu"] == {"0": pytest.approx(0.06), "1": pytest.approx(0.02)}
    assert energy["cost"] == pytest.approx(0.08 * 10 / 3600, rel=0.05)  # 10 s between 11 ticks
    assert [g["energy_per_hour"] for g in document["gpus"]] == [pytest.approx(0.06),
                                                                 pytest.approx(0.02)]
    assert document["burn"]["price_per_hour"] == 2.0  # energy is beside the burn, not in it
    text = report.render_text(document)
    assert "energy: $0.08/h beside the burn (0.40 kW measured at $0.2/kWh)" in text
    assert "energy $/h" in text and "$0.06" in text


def test_the_review_compares_managed_when_asked(tmp_path):
    write_cache(tmp_path / "prices.json", [CachedPrice(
        "aws", "us-east-1", "ml.p4d.24xlarge", "managed:sagemaker:training", 37.688,
        time.time(), "AWS Price List API (AmazonSageMaker)",
        attributes={"platform": "SageMaker", "component": "Training"})])
    config = make_config(tmp_path, instance=P4D, pricing={"compare_managed": True})
    document = build(record(tmp_path, config), config)
    managed = document["review"]["managed"]
    assert managed["managed_per_hour"] == 37.688
    assert managed["self_managed_per_hour"] == pytest.approx(32.7726)
    assert managed["markup_pct"] == pytest.approx((37.688 / 32.7726 - 1) * 100, abs=0.01)
    # The observed workload: the 10 s its 11 ticks were charged (the first charges nothing) of
    # a 300 s window, as a share of a 730 h month.
    assert managed["hours_per_month"] == pytest.approx(730 * 10 / 300, abs=0.1)
    text = report.render_text(document)
    assert "Managed vs self-managed" in text and "SageMaker Training ml.p4d.24xlarge" in text


def test_the_managed_comparison_counts_the_seconds_recorded_across_an_interval_change(
        tmp_path):
    """fix-burn's note: the managed comparison took the time observed as ticks x the store's
    last interval, so a run at 0.2 s ticks (300 ticks, 60 s) before one at 1 s (60 ticks)
    read 360 s. It takes the seconds the spend charged."""
    from daemon.runtime.resume import record_price, record_start

    write_cache(tmp_path / "prices.json", [CachedPrice(
        "aws", "us-east-1", "ml.p4d.24xlarge", "managed:sagemaker:training", 37.688,
        time.time(), "AWS Price List API (AmazonSageMaker)",
        attributes={"platform": "SageMaker", "component": "Training"})])
    config = make_config(tmp_path, instance=P4D, pricing={"compare_managed": True})
    price, _, instance = price_host.price_host(config, None, 2)
    db = tmp_path / "mlcost.db"
    start = time.time() - 200
    runs = ([start + 0.2 * i for i in range(300)], [start + 100 + i for i in range(60)])
    tick = 0
    with Store(str(db)) as store:
        for times in runs:
            record_start(store, times[0] - 0.1)
            record_price(store, price, times[0] - 0.1)
            for ts in times:
                tick += 1
                gpus = tuple(GpuSample(n, f"GPU-{n}", "A100", utilization=50.0,
                                       memory_used_bytes=1 << 30, memory_total_bytes=40 << 30)
                             for n in range(2))
                store.write(Sample(ts=ts, tick=tick, gpus=gpus))
        store.set_meta("host", {"hostname": "box", "interval_s": 1.0, "price": price.as_dict(),
                                "instance": instance})
    document = build(db, config)
    seconds = document["spend"]["seconds"]
    assert seconds == pytest.approx(299 * 0.2 + 59, abs=1e-6)  # each run's first charges none
    managed = document["review"]["managed"]
    assert managed["hours_per_month"] == pytest.approx(730 * seconds / 300, abs=0.1)  # not 360


def test_no_review_of_managed_prices_unless_managed_or_asked(tmp_path):
    config = make_config(tmp_path, instance=P4D)
    document = build(record(tmp_path, config), config)
    assert document["review"]["managed"] is None
    assert "Managed vs self-managed" not in report.render_text(document)


def test_a_managed_host_without_its_price_says_how_to_fetch_it(tmp_path):
    config = make_config(tmp_path, instance={"provider": "aws", "type": "ml.p4d.24xlarge",
                                             "region": "us-east-1"})
    document = build(record(tmp_path, config), config)
    assert "--refresh sagemaker" in document["review"]["managed"]["error"]
    assert "    run: mlcostd prices --refresh sagemaker --region us-east-1 --instance " \
           "p4d.24xlarge" in report.render_text(document)


def test_the_report_s_top_stack_says_how_many_samples_it_has_in_words():
    """'(1 sample)', not '(1 samples)'."""
    stack = {"file": "/srv/train.py", "line": 42, "function": "train_step", "reason": ""}
    lines = report._render_phases([{
        "pid": 42, "command": "python train.py", "phases": {
            "data_wait": {"share": 0.5, "top_stacks": [{**stack, "samples": 1}]},
            "checkpoint": {"share": 0.5, "top_stacks": [{**stack, "samples": 3}]}}}])
    assert any(line.endswith("(1 sample)") for line in lines), lines
    assert any(line.endswith("(3 samples)") for line in lines), lines


def test_each_tick_is_charged_at_the_price_recorded_then(tmp_path):
    """Two runs on one store at different prices (a refreshed price, a resized instance): the
    report charges each tick at its own, lists the change, and skips a reading it cannot
    trust; the store's last price (its meta) no longer prices the ticks before it."""
    from daemon.store import facts

    def hostile(store, ts):  # readings a damaged store holds: skipped
        facts.write_meter_readings(store, ts - 0.4, [
            ("price", "host", float("nan"), {"per_hour": float("nan")})])
        facts.write_meter_readings(store, ts - 0.3, [
            ("price", "host", 1.0, {"per_hour": 1.0, "gpu_count": "eight"})])

    config = make_config(tmp_path, instance=P4D)
    price, _, _ = price_host.price_host(config, None, 2)
    cheap = dataclasses.replace(price, per_hour=2.0, gpu_count=2)  # the 2 GPUs recorded
    dear = dataclasses.replace(price, per_hour=20.0, gpu_count=2)
    db, start = two_runs(tmp_path, cheap, dear, 40, hostile)
    document = build(db, config)
    # 19 charged seconds at $2/h, then 20 at $20/h (each tick charges the second before it)
    assert document["spend"]["total"] == pytest.approx((19 * 2.0 + 20 * 20.0) / 3600, rel=0.01)
    changes = document["burn"]["price_changes"]
    assert [c["per_hour"] for c in changes] == [2.0, 20.0]
    assert changes[0]["since"] == pytest.approx(start) and changes[1]["since"] == pytest.approx(
        start + 19.5)
    assert document["burn"]["price_per_hour"] == 20.0  # the price now, as before
    text = report.render_text(document)
    assert "the price changed in this window (each tick is charged at its own): from " in text
    assert "$2.0000/h (aws p4d.24xlarge, 2 GPUs), from " in text
    buckets = document["timeline"]["buckets"]
    assert {b["burn_per_hour"] for b in buckets} >= {2.0, 20.0}
    assert {b["price_per_gpu"] for b in buckets} >= {1.0, 10.0}  # compare's waste reads it
    # a window of the first run alone: its price and instance, not the store's last
    reader = StoreReader(str(db))
    try:
        early = report.build(reader, 10.0, until=start + 15, config=config)
    finally:
        reader.close()
    assert early["burn"]["price_per_hour"] == 2.0 and early["burn"]["price_changes"] == []
    assert early["host"]["price"]["per_hour"] == 2.0
    assert report_html.collect(db, until=start + 15).price["per_hour"] == 2.0
    # the snapshot page: the same spend, and the change said
    page = report_html.collect(db)
    assert page.spend == pytest.approx(document["spend"]["total"], rel=0.01)
    assert [p["per_hour"] for _, p in page.price_changes] == [2.0, 20.0]
    assert "the price changed in this range, each tick charged at its own: from " in (
        render_page(page))


def test_a_restart_that_changes_no_charge_is_no_price_change(tmp_path):
    """Probe 126 F7: a daemon started again with [instance].electricity_per_kwh added (the same
    $/h, type and GPUs) read "the price changed in this window: from ... $5.6720/h (aws
    g5.12xlarge, 4 GPUs), from ... $5.6720/h (aws g5.12xlarge, 4 GPUs)". The electricity price
    prices the measured power beside the burn, not a tick's charge: no change is listed."""
    config = make_config(tmp_path, instance=P4D)
    price, _, _ = price_host.price_host(config, None, 2)
    before = dataclasses.replace(price, per_hour=2.0, gpu_count=2)
    after = dataclasses.replace(before, electricity_per_kwh=0.14)
    db, _ = two_runs(tmp_path, before, after, 20)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM meter_readings WHERE kind = 'price'").fetchone()[
        0] == 2  # each start recorded its own
    conn.close()
    document = build(db, config)
    assert document["burn"]["price_changes"] == []
    assert "the price changed" not in report.render_text(document)
    page = report_html.collect(db)
    assert page.price_changes == []
    assert "the price changed" not in render_page(page)


def test_a_recorded_price_s_text_is_shown_safe_and_short(tmp_path):
    """A store is anyone's file: the instance a recorded price names reaches the report's text,
    the snapshot page and replay as escaped, one-line, cut text."""
    from daemon.replay import Replay

    config = make_config(tmp_path, instance=P4D)
    price, _, _ = price_host.price_host(config, None, 2)
    hostile = "<script>\x1b[2J" + "x" * 5000
    first = dataclasses.replace(price, per_hour=2.0, gpu_count=2)
    second = dataclasses.replace(price, per_hour=3.0, gpu_count=2, instance_type=hostile,
                                 provider="aws\n")
    db, start = two_runs(tmp_path, first, second, 20)
    text = report.render_text(build(db, config))
    [line] = [line for line in text.splitlines() if "the price changed" in line]
    assert "\x1b" not in line and "\\x1b[2J" in line and len(line) < 400
    [line] = [line for line in text.splitlines() if line.startswith("instance: ")]
    assert "\\x1b[2J" in line and len(line) < 200  # the instance then: the hostile one
    page = render_page(report_html.collect(db))
    assert "<script>" not in page and "\x1b" not in page and "x" * 100 not in page
    with Replay(db) as replay:  # the instance then, as mlcost-top reads it: escaped
        shown = Now.from_dict(replay.state_at(start + 15)).instance["type"]
    assert shown.startswith("<script>\\x1b[2J") and "\x1b" not in shown


def test_a_range_before_a_resize_shows_the_gpus_it_ran_on(tmp_path):
    """A host resized onto other GPUs keeps its store, whose `gpus` table holds the last: the
    report, the page and replay of the first half show its A100s (40 GiB), of the second its
    H100s; the store recorded each GPU's facts when they changed, and only then."""
    from daemon.replay import Replay

    config = make_config(tmp_path, instance=P4D)
    price, _, _ = price_host.price_host(config, None, 2)
    first = dataclasses.replace(price, per_hour=2.0, gpu_count=2)
    second = dataclasses.replace(price, per_hour=8.0, gpu_count=2, instance_type="p5.48xlarge")
    db, start = two_runs(tmp_path, first, second, 20, models=("A100", "H100"))
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT name, count(*) FROM meter_readings WHERE kind = 'gpu' "
                        "GROUP BY name").fetchall() == [("0", 2), ("1", 2)]
    conn.close()
    reader = StoreReader(str(db))
    try:
        early = report.build(reader, 10.0, until=start + 8, config=config)
        # (from the second run's first tick: a window with an A100 tick has its row too)
        late = report.build(reader, 9.0, until=start + 19, config=config)
    finally:
        reader.close()
    assert [(g["name"], g["memory_total_bytes"], g["uuid"]) for g in early["gpus"]] == [
        ("A100", 40 << 30, "GPU-A100-0"), ("A100", 40 << 30, "GPU-A100-1")]
    assert [g["name"] for g in late["gpus"]] == ["H100", "H100"]
    assert "NVIDIA" not in report.render_text(early) and "A100" in report.render_text(early)
    assert [g["name"] for g in report_html.collect(db, until=start + 8).gpus] == ["A100"] * 2
    with Replay(db) as replay:
        then, now = replay.state_at(start + 5), replay.state_at(start + 15)
    assert [(g["name"], g["memory_total_bytes"]) for g in then["gpus"]] == [
        ("A100", 40 << 30)] * 2
    assert [(g["name"], g["memory_total_bytes"]) for g in now["gpus"]] == [
        ("H100", 80 << 30)] * 2



def test_a_window_across_a_resize_has_a_row_per_gpu_and_model(tmp_path):
    """Probe 126 F5: a window across a restart onto other GPUs (8 x A100, then 8 x H100 on the
    same store) named every GPU an H100 and averaged both models' readings in its row. Each
    GPU is a row per model, each over its part of the window, and the text says why."""
    config = make_config(tmp_path, instance=P4D)
    price, _, _ = price_host.price_host(config, None, 2)
    first = dataclasses.replace(price, per_hour=2.0, gpu_count=2)
    second = dataclasses.replace(price, per_hour=8.0, gpu_count=2, instance_type="p5.48xlarge")
    db, start = two_runs(tmp_path, first, second, 20, models=("A100", "H100"))
    document = build(db, config)
    assert [(g["index"], g["name"], g["memory_total_bytes"], g["samples"])
            for g in document["gpus"]] == [
        (0, "A100", 40 << 30, 10), (0, "H100", 80 << 30, 10),
        (1, "A100", 40 << 30, 10), (1, "H100", 80 << 30, 10)]
    rows = document["gpus"]
    assert rows[0]["until"] == rows[1]["since"] == pytest.approx(start + 9.5)
    text = report.render_text(document)
    assert "the GPUs changed in this window" in text
    assert [line.split()[:2] for line in text.splitlines()
            if line.startswith("  0 ") or line.startswith("  1 ")] == [
        ["0", "A100"], ["0", "H100"], ["1", "A100"], ["1", "H100"]]
    # a window of one run: a row per GPU, as before
    reader = StoreReader(str(db))
    try:
        late = report.build(reader, 8.0, until=start + 19, config=config)
    finally:
        reader.close()
    assert [(g["name"], g["since"]) for g in late["gpus"]] == [("H100", None)] * 2
    assert "the GPUs changed" not in report.render_text(late)


def test_the_snapshot_page_across_a_resize_has_a_row_per_gpu_and_model(tmp_path):
    """Probe 126 F5's rest: the report got a row per GPU and model across a restart onto other
    GPUs, but the snapshot page (`snapshot --render`, an incident's page) still named every GPU
    the last model, with both models' samples in its row. Its GPU table is built as the
    report's now, and says why a GPU has two rows."""
    config = make_config(tmp_path, instance=P4D)
    price, _, _ = price_host.price_host(config, None, 2)
    first = dataclasses.replace(price, per_hour=2.0, gpu_count=2)
    second = dataclasses.replace(price, per_hour=8.0, gpu_count=2, instance_type="p5.48xlarge")
    db, start = two_runs(tmp_path, first, second, 20, models=("A100", "H100"))
    data = report_html.collect(db)
    assert [(g["index"], g["name"], g["memory_total_bytes"], g["samples"])
            for g in data.gpus] == [
        (0, "A100", 40 << 30, 10), (0, "H100", 80 << 30, 10),
        (1, "A100", 40 << 30, 10), (1, "H100", 80 << 30, 10)]
    page = render_page(data)
    assert 'data-gpus-changed="1"' in page and "the GPUs changed in this range" in page
    assert sorted(data.gpu_utilization) == [0, 1]  # a chart line per GPU, not per row
    # a range of one run: a row per GPU, no note
    late = report_html.collect(db, since=start + 11, until=start + 19)
    assert [g["name"] for g in late.gpus] == ["H100"] * 2
    assert "the GPUs changed" not in render_page(late)


def test_a_window_from_the_rollups_cuts_the_minute_the_gpus_changed_in_at_the_change(tmp_path):
    """Probe 126 F5's rest: over the rollups (a window over 15 minutes) the minute a resize
    fell in counted whole in the new GPU's row, so its row held the old model's ticks of that
    minute (a minute rollup holds both) and the old model's row lost them. That minute is read
    from its raw ticks now: each row has its model's ticks and readings only."""
    from daemon.runtime.resume import record_price, record_start

    config = make_config(tmp_path, instance=P4D)
    price, _, _ = price_host.price_host(config, None, 2)
    first = dataclasses.replace(price, per_hour=2.0, gpu_count=2)
    second = dataclasses.replace(price, per_hour=8.0, gpu_count=2, instance_type="p5.48xlarge")
    db = tmp_path / "mlcost.db"
    start = (time.time() // 60 - 25) * 60 + 0.25  # 25 minutes ago, just after a minute began
    change = 630  # the tick the H100s start at: 30 s into a minute
    with Store(str(db)) as store:
        record_start(store, start - 1)
        record_price(store, first, start - 1)
        for i in range(1200):
            if i == change:
                record_start(store, start + i - 0.5)
                record_price(store, second, start + i - 0.5)
            model, util = ("A100", 20.0) if i < change else ("H100", 90.0)
            gpus = tuple(GpuSample(n, f"GPU-{model}-{n}", model, utilization=util,
                                   power_watts=100.0, memory_used_bytes=1 << 30,
                                   memory_total_bytes=(80 if model == "H100" else 40) << 30)
                         for n in range(2))
            store.write(Sample(ts=start + i, tick=i + 1, gpus=gpus))
        store.set_meta("host", {"hostname": "box", "interval_s": 1.0,
                                "price": second.as_dict(),
                                "instance": {"provider": "aws", "type": second.instance_type}})
        while store.maintain(budget_s=1.0):
            pass
    reader = StoreReader(str(db))
    try:
        document = report.build(reader, 1300.0, until=start + 1199, config=config)
    finally:
        reader.close()
    assert document["window"]["source"] == "rollups"
    assert [(g["index"], g["name"], g["samples"], g["utilization"])
            for g in document["gpus"]] == [
        (0, "A100", change, 20.0), (0, "H100", 1200 - change, 90.0),
        (1, "A100", change, 20.0), (1, "H100", 1200 - change, 90.0)]


def test_a_gpu_reading_that_is_not_what_it_should_be_is_not_believed():
    from daemon.store import queries

    readings = {("gpu", "0"): [(10.0, 1.0, {"uuid": 5, "name": "x" * 1000,
                                            "memory_total_bytes": "lots",
                                            "memory_reserved_bytes": True})],
                ("gpu", "zero"): [(10.0, 1.0, {"name": "A100"})],
                ("gpu", "1"): [(20.0, 1.0, {"name": "H100"})]}
    assert queries.gpus_then(readings, 15.0) == {0: {
        "name": "x" * 200, "memory_total_bytes": None, "memory_reserved_bytes": None}}
    assert set(queries.gpus_then(readings, 25.0)) == {0, 1}


def test_the_page_and_the_replay_say_the_reports_spend_of_a_long_range_across_a_restart(
        tmp_path):
    """Probe 126 F9: a snapshot of 1102 ticks, a run at $32.77/h, 43 s down, one at $55.06/h.
    The page and `mlcost-top --replay` charged an even spread of 240 of its ticks: nothing
    before the first they picked, after the last, nor from run 1's last picked to its real
    last tick, and read $15.53 beside the report's $15.64. All three read the range's first
    and last ticks and those either side of the daemon start (daemon.analysis.range_ticks)."""
    from daemon.replay import Replay
    from daemon.runtime.resume import record_price, record_start

    config = make_config(tmp_path, instance=P4D)
    price, _, _ = price_host.price_host(config, None, 2)
    cheap = dataclasses.replace(price, per_hour=32.7726, gpu_count=2)
    dear = dataclasses.replace(price, per_hour=55.06, gpu_count=2, instance_type="p5.48xlarge")
    # within one UTC day, yesterday (the replay's spend so far is the day's)
    start = time.time() // 86400 * 86400 - 86400 + 3600 + 0.25
    runs = ([start + i for i in range(197)], [start + 196 + 43 + i for i in range(905)])
    db = tmp_path / "mlcost.db"
    tick = 0
    with Store(str(db)) as store:
        for run, charged in zip(runs, (cheap, dear), strict=True):
            record_start(store, run[0] - 1.5)
            record_price(store, charged, run[0] - 1.5)
            for ts in run:
                tick += 1
                gpus = tuple(GpuSample(n, f"GPU-{n}", "A100", utilization=50.0,
                                       power_watts=100.0, memory_used_bytes=1 << 30,
                                       memory_total_bytes=40 << 30) for n in range(2))
                store.write(Sample(ts=ts, tick=tick, gpus=gpus))
        store.set_meta("host", {"hostname": "box", "interval_s": 1.0, "price": dear.as_dict()})
    expected = (196 * 32.7726 + 904 * 55.06) / 3600  # each run's first tick charges nothing
    reader = StoreReader(str(db))
    try:
        document = report.build(reader, runs[1][-1] - start + 1, until=runs[1][-1],
                                config=config)
    finally:
        reader.close()
    assert document["spend"]["total"] == pytest.approx(expected, rel=1e-6)
    page = report_html.collect(db)
    assert page.spend == pytest.approx(expected, rel=1e-6)  # was $0.1 short
    assert page.price_changes[0][0] == pytest.approx(start)  # the range's first tick's price
    with Replay(db) as replay:
        assert replay.state_at(runs[1][-1])["cost"]["total"] == pytest.approx(expected, rel=1e-6)


def test_the_page_and_the_replay_charge_a_stall_as_the_ledger_did(tmp_path):
    """Probe 153 H1, the page's and the replay's side: an even spread of 240 ticks of 14 h of
    10 s ticks holding a 600 s stall of the daemon inside a run, replayed with a gap cap
    widened to 1.5 steps (316 s), charged 316 s of the stall; the ledger charged its first
    minute. All three now read the stall's two ticks and cap that interval at the ledger's
    minute (range_ticks)."""
    from daemon.replay import Replay
    from daemon.runtime.resume import record_price, record_start

    config = make_config(tmp_path, instance=P4D)
    price, _, _ = price_host.price_host(config, None, 2)
    price = dataclasses.replace(price, per_hour=32.7726, gpu_count=2)
    start = time.time() // 86400 * 86400 - 86400 + 3600 + 0.25  # yesterday, one UTC day
    run = [start + 10.0 * i for i in range(2520)]
    run += [run[-1] + 600.0 + 10.0 * i for i in range(2520)]
    db = tmp_path / "mlcost.db"
    with Store(str(db)) as store:
        record_start(store, run[0] - 1.5)
        record_price(store, price, run[0] - 1.5)
        for tick, ts in enumerate(run, 1):
            gpus = tuple(GpuSample(n, f"GPU-{n}", "A100", utilization=50.0, power_watts=100.0,
                                   memory_used_bytes=1 << 30, memory_total_bytes=40 << 30)
                         for n in range(2))
            store.write(Sample(ts=ts, tick=tick, gpus=gpus))
        store.set_meta("host", {"hostname": "box", "interval_s": 10.0, "price": price.as_dict()})
    expected = (2 * 2519 * 10 + 60) * 32.7726 / 3600  # the stall's first minute
    reader = StoreReader(str(db))
    try:
        document = report.build(reader, run[-1] - start + 1, until=run[-1], config=config)
    finally:
        reader.close()
    assert document["spend"]["total"] == pytest.approx(expected, rel=1e-6)
    assert document["spend"]["unaccounted_seconds"] == pytest.approx(540.0)
    page = report_html.collect(db)
    assert page.spend == pytest.approx(expected, rel=1e-6)
    # the energy counts the seconds the spend charged (it counted 316 s of the stall)
    charged_s = 2 * 2519 * 10 + 60
    for carbon in (document["carbon"], page.carbon):
        assert carbon is not None
        assert carbon["covered_s"] == pytest.approx(charged_s)
        assert carbon["joules"] == pytest.approx(2 * 100.0 * charged_s, rel=1e-6)
    with Replay(db) as replay:
        assert replay.state_at(run[-1])["cost"]["total"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("ticks", [600, 5400])
def test_the_pages_process_dollars_are_the_reports(tmp_path, ticks):
    """Probe 157 H2: the snapshot page replayed its charts' 240-tick spread for each process's
    dollars and energy, the report its own ticks (every one of a 10-min range of a few
    processes; an even 150 of a long one): two processes sharing a GPU whose SM shares move
    read $0.6793 on the page beside $0.6782 in the report. Both replay the same ticks now."""
    from daemon.runtime.resume import record_price, record_start
    from daemon.sources.sample import GpuUse, ProcessSample

    config = make_config(tmp_path, instance=P4D)
    price, _, _ = price_host.price_host(config, None, 1)
    start = time.time() // 86400 * 86400 - 86400 + 3600 + 0.25
    db = tmp_path / "mlcost.db"
    with Store(str(db)) as store:
        record_start(store, start - 1.5)
        record_price(store, price, start - 1.5)
        for tick in range(1, ticks + 1):
            ts = start + tick
            share = 10.0 + 80.0 * ((tick * 7) % 13) / 12  # a share that moves tick by tick
            procs = tuple(ProcessSample(
                pid=400 + n, start_time=start - 100, ppid=1, user="alice",
                command=f"python train_{n}.py", cpu_seconds=float(tick),
                gpus=(GpuUse(0, 4 << 30, share if n == 0 else 100.0 - share),))
                for n in range(2))
            gpu = GpuSample(0, "GPU-0", "A100", utilization=95.0, power_watts=200.0 + share,
                            memory_used_bytes=8 << 30, memory_total_bytes=40 << 30)
            store.write(Sample(ts=ts, tick=tick, gpus=(gpu,), processes=procs))
        store.set_meta("host", {"hostname": "box", "interval_s": 1.0, "price": price.as_dict()})
    reader = StoreReader(str(db))
    try:
        document = report.build(reader, ticks + 1, until=start + ticks, config=config)
    finally:
        reader.close()
    page = report_html.collect(db)
    reported = {p["pid"]: p for p in document["processes"]}
    shown = {p["pid"]: p for p in page.processes}
    assert set(reported) == set(shown) == {400, 401}
    for pid in (400, 401):
        assert shown[pid]["cost"] == pytest.approx(reported[pid]["cost"], rel=1e-9), pid
        assert shown[pid]["burn_per_hour"] == pytest.approx(
            reported[pid]["burn_per_hour"], rel=1e-9), pid
        assert shown[pid]["energy"]["joules"] == pytest.approx(
            reported[pid]["energy"]["joules"], rel=1e-9), pid
    assert page.spend == pytest.approx(document["spend"]["total"], rel=1e-9)
