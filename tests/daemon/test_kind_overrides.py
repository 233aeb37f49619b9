"""[kinds.jobs]: a job's kind set in the config replaces the classified one, says so in its
evidence (with what the classifier said), keeps what the process did (a server still serves),
and a bad value fails at start naming the key, the value and the kinds allowed."""

from __future__ import annotations

import os
import re

import psutil
import pytest

from daemon import config
from daemon.config import ConfigError
from daemon.runtime.kinds import KindTracker
from daemon.wire import process_key

NOW = 1_000_000.0
ME = (os.getpid(), psutil.Process().create_time())


def kind_of(tracker: KindTracker, command: str, owner=None, markers=None):
    tracker.refresh([(*ME, command, owner or {})], {ME: markers or {}}, NOW)
    return tracker.kinds[process_key(*ME)]


def test_a_job_label_from_cost_jobs_gets_its_configured_kind():
    tracker = KindTracker(job_kinds={"embedder": "batch_inference"},
                          jobs={"embedder": r"train_embed"})
    # 'train' on the command line would say training; the config says what it is.
    kind = kind_of(tracker, "python train_embed.py --shard 3",
                   markers={"optimizer_step": NOW})
    assert kind.kind == "batch_inference" and kind.source == "config"
    assert kind.confidence == 1.0
    assert kind.evidence[0] == "set in config: [kinds.jobs] job 'embedder' = 'batch_inference'"
    assert kind.evidence[1].startswith("classified training (")
    assert kind.as_dict()["kind_source"] == "config"


def test_the_script_name_and_the_owner_workload_are_job_labels_too():
    by_script = KindTracker(job_kinds={"serve.py": "online_inference"})
    assert kind_of(by_script, "python /srv/serve.py --port 0").kind == "online_inference"
    by_pod = KindTracker(job_kinds={"ml/trainer-0": "training"})
    kind = kind_of(by_pod, "python main.py", owner={"namespace": "ml", "pod": "trainer-0"})
    assert kind.kind == "training" and kind.source == "config"


def test_a_job_the_config_does_not_name_keeps_its_classified_kind():
    tracker = KindTracker(job_kinds={"serve.py": "online_inference"})
    kind = kind_of(tracker, "python other.py", markers={"optimizer_step": NOW})
    assert kind.kind == "training" and kind.source == "observed"
    assert not any("set in config" in e for e in kind.evidence)


def test_a_daemon_built_from_config_applies_the_override(tmp_path):
    from daemon.runtime.daemon import Daemon

    loaded = config.from_dict({"daemon": {"db": str(tmp_path / "x.db")},
                               "cost": {"jobs": {"llm": "serve_llm"}},
                               "kinds": {"jobs": {"llm": "online_inference"}}}, where="test")
    tracker = Daemon(loaded).kinds
    assert kind_of(tracker, "python serve_llm.py").kind == "online_inference"


@pytest.mark.parametrize("text, expected", [
    ('[kinds.jobs]\nmy-job = "serving"\n',
     "[kinds.jobs].my-job = 'serving': not a workload kind; allowed values are 'training', "
     "'batch_inference', 'online_inference', 'notebook', 'other'"),
    ('[kinds.jobs]\nmy-job = 3\n', "[kinds.jobs].my-job = 3: not a workload kind"),
    # a key with a dot, quoted as the file must spell it
    ('[kinds.jobs]\n"serve.py" = "servering"\n',
     "[kinds.jobs].\"serve.py\" = 'servering': not a workload kind"),
    ('[kinds]\njobs = "online_inference"\n', "[kinds].jobs = 'online_inference': must be a table"),
    ('[kinds]\njob = {}\n',
     "unknown key [kinds].job (did you mean jobs?); allowed keys in [kinds]: jobs"),
])
def test_bad_kind_settings_fail_at_start_with_the_key_value_and_what_is_allowed(tmp_path, text,
                                                                                expected):
    path = tmp_path / "mlcostd.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(expected)):
        config.load(path)
