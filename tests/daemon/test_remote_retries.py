"""Probe 147's shapes: a job retrying a throttled object store (H1), the idle_gpu_held SIGTERM's
words (L2), and a Jupyter-style kernel read as a server (M1, L3). Built from the probe's recorded
stacks, sources and figures (/work/probe147: A2quiet, A2load)."""

from __future__ import annotations

import pytest
from test_rules import by_rule, pid_id, recs, window

from daemon.analysis import stack_rules
from daemon.analysis.host_signals import HostSignals
from daemon.analysis.idleness import process_evidence
from daemon.analysis.inference_audit import audit_inference
from daemon.analysis.kinds import NOTEBOOK, ONLINE_INFERENCE, TRAINING, Kind, classify_kind
from daemon.analysis.phases import classify
from daemon.sources.frames import Frame, ThreadStack
from daemon.sources.kindfacts import KindFacts

# probe 147's shard_train.py, lines 11-21 and 29, as the daemon reads them (its file, unchanged)
SHARD_TRAIN = {
    11: "def fetch(i):",
    12: "    delay = 1.0",
    13: "    for attempt in range(20):",
    14: "        try:",
    15: "            with urllib.request.urlopen(URL.format(i), timeout=30) as r:",
    16: "                return r.read()",
    17: "        except (urllib.error.HTTPError, urllib.error.URLError, TimeoutError) as e:",
    18: '            log.warning("shard %d attempt %d: %s; retrying in %.1fs", i, attempt, e, '
        "delay)",
    19: "        time.sleep(delay * random.uniform(0.8, 1.2))",
    20: "        delay = min(delay * 2, 32.0)",
    21: '    raise RuntimeError(f"shard {i}: gave up")',
    22: "",
    23: "def main():",
    28: "    while True:",
    29: "        data = fetch(i)",
}
SHARD_FILE = "/work/probe147/progs/shard_train.py"
# its main thread in all 95 of 95 dumps (A2quiet): the sleep, C, below fetch's line 19
SHARD_STACK = [(SHARD_FILE, "fetch", 19), (SHARD_FILE, "main", 29),
               (SHARD_FILE, "<module>", 35)]


def main_thread(frames: list[tuple[str, str, int]]) -> list[ThreadStack]:
    return [ThreadStack(1, "MainThread", False, tuple(Frame(n, f, ln) for f, n, ln in frames))]


def lines(source: dict[int, str]):
    return lambda frame: source.get(frame.line)


def test_a_sleep_in_a_loop_that_retries_an_http_download_waits_on_a_remote_service():
    """H1: shard_train.py's backoff sleep read "sleeping or waiting" and kept idle_gpu_held's
    SIGTERM; its loop's urlopen, 4 lines above the sleep, makes it a wait on a remote service."""
    found = classify(main_thread(SHARD_STACK), gpu_busy=False, source_line=lines(SHARD_TRAIN))
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.REMOTE_WAIT), found.reason
    assert "urllib.request.urlopen(URL.format(i), timeout=30)" in found.reason, found.reason
    assert "line 15" in found.reason and "(urllib)" in found.reason, found.reason
    assert found.frame == Frame("fetch", SHARD_FILE, 19)


@pytest.mark.parametrize("fetch, what", [
    ("            r = requests.get(url, timeout=10)", "requests/httpx"),
    ("            r = httpx.post(url, json=batch)", "requests/httpx"),
    ("            r = self.session.get(url, stream=True)", "a session"),
    ("            async with session.get(url) as r:", "a session"),
    ("            obj = s3.get_object(Bucket=bucket, Key=key)", "S3"),
    ("            s3.download_file(bucket, key, local)", "S3"),
    ("            blob.download_to_filename(local)", "Google Cloud Storage"),
    ("            data = blob_client.download_blob().readall()", "Azure"),
    ("            with fsspec.open(path, 'rb') as f:", "fsspec"),
    ("            with fs.open(f's3://{bucket}/{key}', 'rb') as f:", "a remote URL"),
    ("            path = hf_hub_download(repo_id, filename)", "Hugging Face"),
])
def test_each_named_client_of_a_remote_store_in_the_retry_loop(fetch, what):
    source = {**SHARD_TRAIN, 15: fetch, 16: "                break"}
    found = classify(main_thread(SHARD_STACK), gpu_busy=False, source_line=lines(source))
    assert found.reason.startswith(stack_rules.REMOTE_WAIT), (fetch, found.reason)
    assert what in found.reason, (fetch, found.reason)


def test_a_sleep_in_a_helper_called_from_the_retry_loop_and_a_fetch_in_the_loops_header():
    helper = {5: "def backoff(n):", 6: "    time.sleep(min(2 ** n, 32))",
              10: "def fetch(url):", 11: "    for n in range(8):",
              12: "        r = requests.get(url)", 13: "        if r.ok:",
              14: "            return r.content", 15: "        backoff(n)"}
    stack = [("/srv/job.py", "backoff", 6), ("/srv/job.py", "fetch", 15),
             ("/srv/job.py", "<module>", 30)]
    found = classify(main_thread(stack), gpu_busy=False, source_line=lines(helper))
    assert found.reason.startswith(stack_rules.REMOTE_WAIT), found.reason
    assert "in its caller fetch" in found.reason, found.reason
    header = {20: "    while requests.get(status_url).json()['state'] != 'ready':",
              21: "        time.sleep(30)"}
    found = classify(main_thread([("/srv/job.py", "wait_ready", 21)]), gpu_busy=False,
                     source_line=lines(header))
    assert found.reason.startswith(stack_rules.REMOTE_WAIT), found.reason


@pytest.mark.parametrize("source", [
    # a stalled loop: no fetch near its sleep
    {**SHARD_TRAIN, 15: "            with open(path, 'rb') as r:"},
    # a dict's get, a queue's get: no named client
    {**SHARD_TRAIN, 15: "            r = cfg.get('url')"},
    # the download done before the loop; the loop only waits for a go-file (a file wait,
    # probe 152 H2: no remote one)
    {10: "    data = urllib.request.urlopen(url).read()", 11: "    while not os.path.exists(go):",
     12: "        time.sleep(5)"},
    # a fetch after the loop, at the function's level
    {11: "    while not os.path.exists(go):", 12: "        time.sleep(5)",
     13: "    data = requests.get(url).content"},
    # a fetch in the loop but further than POLL_LINES_LOOKED_AT from the sleep
    {3: "    while True:", 4: "        r = requests.get(url)",
     **{n: "        step()" for n in range(5, 12)}, 12: "        time.sleep(5)"},
    # a sleep in no loop, a fetch just above it
    {10: "def wait():", 11: "    r = requests.get(url)", 12: "    time.sleep(600)"},
])
def test_a_sleep_with_no_fetch_in_its_loop_stays_a_plain_sleep(source):
    at = max(n for n, text in source.items() if "sleep(" in text)
    found = classify(main_thread([("/srv/job.py", "wait", at)]), gpu_busy=False,
                     source_line=lines(source))
    assert found.phase == "idle", found
    plain = ("sleeping or waiting" if not any("os.path.exists" in t for t in source.values())
             else stack_rules.FILE_WAIT)
    assert found.reason.startswith(plain), (source, found.reason)


SITE = "/srv/venv/lib/python3.11/site-packages"
# requests with HTTPAdapter(max_retries=Retry(backoff_factor=...)) asleep in urllib3 2.8's
# backoff, and boto3 asleep in botocore 1.44's retry (their files' own line numbers)
URLLIB3_RETRY = [(f"{SITE}/urllib3/util/retry.py", "Retry._sleep_backoff", 383),
                 (f"{SITE}/urllib3/util/retry.py", "Retry.sleep", 399),
                 (f"{SITE}/urllib3/connectionpool.py", "HTTPConnectionPool.urlopen", 972),
                 (f"{SITE}/requests/adapters.py", "HTTPAdapter.send", 696),
                 (f"{SITE}/requests/sessions.py", "Session.send", 703),
                 (f"{SITE}/requests/sessions.py", "Session.request", 589),
                 (f"{SITE}/requests/sessions.py", "Session.get", 602),
                 ("/srv/job.py", "fetch", 12), ("/srv/job.py", "<module>", 30)]
BOTOCORE_RETRY = [(f"{SITE}/botocore/endpoint.py", "Endpoint._needs_retry", 381),
                  (f"{SITE}/botocore/endpoint.py", "Endpoint._send_request", 202),
                  (f"{SITE}/botocore/endpoint.py", "Endpoint.make_request", 119),
                  (f"{SITE}/botocore/client.py", "BaseClient._make_api_call", 1005),
                  (f"{SITE}/botocore/client.py",
                   "ClientCreator._create_api_method.<locals>._api_call", 565),
                  ("/srv/job.py", "fetch", 12), ("/srv/job.py", "<module>", 30)]
TENACITY_RETRY = [(f"{SITE}/tenacity/nap.py", "sleep", 31),
                  (f"{SITE}/tenacity/__init__.py", "Retrying.__call__", 477),
                  (f"{SITE}/tenacity/__init__.py", "BaseRetrying.wraps.<locals>.wrapped_f", 336),
                  ("/srv/job.py", "<module>", 30)]


@pytest.mark.parametrize("frames, what", [(URLLIB3_RETRY, "urllib3's Retry"),
                                          (BOTOCORE_RETRY, "botocore's retries"),
                                          (TENACITY_RETRY, "tenacity")])
def test_a_client_library_asleep_in_its_own_retry_backoff_waits_on_a_remote_service(frames,
                                                                                      what):
    """It read "main thread blocked", and idle_gpu_held offered the SIGTERM."""
    source = {12: "        obj = s3.get_object(Bucket=b, Key=k)", 30: "data = fetch(key)"}
    found = classify(main_thread(frames), gpu_busy=False, source_line=lines(source))
    assert found.phase == "idle", found
    assert found.reason.startswith(stack_rules.REMOTE_WAIT), found.reason
    assert f"the backoff of {what}" in found.reason, found.reason
    # as the daemon classifies it live: the user line repeats from dump to dump, its CPU
    # still, its GPU idle (probe 147's rerun: 46 of 47 samples read "waiting with its GPU idle
    # and no I/O: not a sync" before this was looked at ahead of the repeating line)
    still = HostSignals(seconds=2.0, main_thread_cpu=0.0, process_cpu=0.0, gpu_busy=False)
    for signals in (still, None):
        found = classify(main_thread(frames), gpu_busy=False, source_line=lines(source),
                         repeated_leaf=True, signals=signals)
        assert found.reason.startswith(stack_rules.REMOTE_WAIT), (signals, found.reason)
    # the same request's frames with no retry asleep below them (a read in C): as before
    plain = [f for f in frames if "retry" not in f[1].lower() and "nap" not in f[0]
             and "_needs_retry" not in f[1]]
    found = classify(main_thread(plain), gpu_busy=False, source_line=lines(source))
    assert not found.reason.startswith(stack_rules.REMOTE_WAIT), found.reason


def test_a_hostile_line_is_bounded():
    source = {3: "    while True:", 4: "        x = requests.get(" + "(" * 100_000,
              5: "        time.sleep(1)" + " " * 4000}
    found = classify(main_thread([("/srv/job.py", "f", 5)]), gpu_busy=False,
                     source_line=lines(source))
    assert found.reason.startswith(stack_rules.REMOTE_WAIT)
    assert len(found.reason) < 600, len(found.reason)


def _shard_window():
    """Probe 147's shard_train.py in A2quiet: 16 GiB on GPU 5, no kernels after a 1 s warm-up,
    its CPU still (5e-05 cores), its stacks in the backoff sleep 95 of 95 dumps."""
    s = window(n=61, utils=[0.0] * 8, holders={0: 0.0}, mem=16 * 2**30,
               command="/srv/venv/bin/python /work/probe147/progs/shard_train.py")
    found = classify(main_thread(SHARD_STACK), gpu_busy=False, source_line=lines(SHARD_TRAIN))
    stacks = [{"frames": ["shard_train.py:19 fetch"], "file": SHARD_FILE, "line": 19,
               "function": "fetch", "samples": 95, "reason": found.reason}]
    phases = {pid_id(s): {"idle": {"seconds": 207.9, "share": 0.9996, "gpu_idle_seconds": 0,
                                   "top_stacks": stacks},
                          "compute": {"seconds": 0.08, "share": 0.0004, "gpu_idle_seconds": 0,
                                      "top_stacks": []}}}
    return s, phases


def test_a_job_retrying_its_store_is_told_to_look_at_the_service_not_sent_sigterm():
    """H1: idle_gpu_held offered `sigterm` to shard_train.py. Its money idling is still
    reported; the action names the wait and what to do, no kill; its host is not stopped."""
    s, phases = _shard_window()
    kinds = {pid_id(s): Kind(TRAINING, 0.5, ("'train' on its command line",))}
    found = recs(s, phases, kinds=kinds)
    [rec] = by_rule(found, "idle_gpu_held")
    assert rec.action["kind"] == "copy_commands", rec.action
    assert "signal" not in rec.action
    assert not any("kill" in c for c in rec.action["commands"]), rec.action
    assert f"retries or polls a remote service ({SHARD_FILE}:19" in rec.action["text"]
    assert "prefetch/cache its shards locally" in rec.action["text"]
    assert "retries/waits on a remote store" in rec.summary, rec.summary
    assert rec.savings_per_month > 0
    assert by_rule(found, "host_idle") == []
    # a plain sleep there (no fetch in its loop) keeps the SIGTERM, as the README says
    plain = {**SHARD_TRAIN, 15: "            with open(path, 'rb') as r:"}
    slept = classify(main_thread(SHARD_STACK), gpu_busy=False, source_line=lines(plain))
    phases[pid_id(s)]["idle"]["top_stacks"][0]["reason"] = slept.reason
    [rec] = by_rule(recs(s, phases, kinds=kinds), "idle_gpu_held")
    assert rec.action["kind"] == "sigterm", rec.action


def test_mlcostd_idle_counts_a_job_retrying_its_store_as_active():
    s, phases = _shard_window()
    reason = phases[pid_id(s)]["idle"]["top_stacks"][0]["reason"]
    proc = {"phase": "idle", "phase_reasons": {"idle": reason}, "phases": {"idle": 0.9996}}
    assert any("remote service" in why for why, _ in process_evidence(proc))
    proc["phase_reasons"] = {"idle": "sleeping or waiting: `time.sleep(5)` with the GPU idle"}
    assert process_evidence(proc) == []


def test_the_sigterm_says_what_the_process_is():
    """L2: a training job was told "close the notebook kernel / job"."""
    s = window(n=61, utils=[0.0] * 8, holders={0: 0.0}, command="python stalled.py")
    stacks = [{"frames": ["job.py:8 <module>"], "file": "/srv/job.py", "line": 8,
               "function": "<module>", "samples": 20,
               "reason": "sleeping or waiting: `time.sleep(60)` with the GPU idle"}]
    phases = {pid_id(s): {"idle": {"seconds": 600, "share": 1.0, "gpu_idle_seconds": 0,
                                   "top_stacks": stacks}}}
    [job] = by_rule(recs(s, phases, kinds={pid_id(s): Kind(TRAINING, 0.5, ("t",))}),
                    "idle_gpu_held")
    assert job.action["kind"] == "sigterm", job.action
    assert "notebook" not in job.action["text"], job.action["text"]
    assert job.action["text"] == "release the GPU: stop the job: send SIGTERM to pid 42 after " \
                                 "confirmation"
    [nb] = by_rule(recs(s, phases, kinds={pid_id(s): Kind(NOTEBOOK, 0.9, ("t",))}),
                   "idle_gpu_held")
    assert nb.action["kind"] == "sigterm", nb.action
    assert "shut its kernel down (or ask its user)" in nb.action["text"], nb.action["text"]
    assert "is lost" in nb.action["text"], nb.action["text"]


# probe 147's kernel.py as the kind classifier saw it in A2quiet: three TCP listeners on
# 127.0.0.1 (shell, control, heartbeat), its frontend connected to two of them, its GPU idle
PROBE_KERNEL = ("/work/wt-probe147/.venv/bin/python /work/probe147/progs/kernel.py -f "
                "/work/probe147/rt/kernel-5b1e.json")
IPYKERNEL = ("/usr/bin/python3 -m ipykernel_launcher -f "
             "/root/.local/share/jupyter/runtime/kernel-0b8e1c9e-4d7a-4d1e-9a53-2f1c5b7e0a11.json")
VSCODE_KERNEL = ("/opt/conda/bin/python -m ipykernel_launcher --ip=127.0.0.1 --stdin=9003 "
                 "--control=9001 --hb=9000 --shell=9002 --transport=\"tcp\" --iopub=9004 "
                 "--f=/root/.local/share/jupyter/runtime/kernel-v2-3042Gs4pQm1rE2.json")


def kernel_facts(**kw) -> KindFacts:
    base = {"listening_ports": (33077, 42129, 44791), "accepted_seen_at": 1000.0,
            "accepted_connections": 2, "accepted_reads": 21, "connections_caught": 2,
            "sockets_read_at": 1201.0, "first_sockets_read_at": 1000.0}
    return KindFacts(**{**base, **kw})


@pytest.mark.parametrize("command", [PROBE_KERNEL, IPYKERNEL, VSCODE_KERNEL])
def test_a_jupyter_kernel_connected_to_its_frontend_is_a_notebook_not_a_server(command):
    """M1: kernel.py read online_inference 0.44, serves True (listens 2 + accepted 2 tied with
    the kernel command line's 4, and the tie went to the first kind in KINDS), and got
    idle_server's "scale to zero ... per 1k requests"; its kind record carried the inference
    audit's "vLLM or TGI" (L3). A kernel's ports are its frontend's."""
    kind = classify_kind(command, kernel_facts(), {}, now=1201.0, gpu_use="idle")
    assert kind.kind == NOTEBOOK, kind
    assert kind.serves is False, kind
    assert any("its frontend" in e for e in kind.evidence), kind.evidence
    assert audit_inference(kind, kernel_facts()) is None  # no "vLLM or TGI" (L3)
    # while it runs cells (bursty GPU use while connected): still a notebook
    busy = classify_kind(command, kernel_facts(), {}, now=1201.0, gpu_use="bursty",
                         kernels_at=1200.0)
    assert busy.kind == NOTEBOOK, busy


def test_a_notebook_kernel_is_told_to_save_and_shut_down_not_to_scale_to_zero():
    """M1 end to end: the kernel's kind from its probe figures, through the rules."""
    s = window(n=61, utils=[0.0] * 8, holders={0: 0.0}, mem=14 * 2**30, command=PROBE_KERNEL)
    kind = classify_kind(PROBE_KERNEL, kernel_facts(), {}, now=1201.0, gpu_use="idle")
    stacks = [{"frames": ["kernel.py:54 main"], "file": "/work/probe147/progs/kernel.py",
               "line": 54, "function": "main", "samples": 85,
               "reason": "waiting in select (selectors.py:468 EpollSelector.select)"}]
    phases = {pid_id(s): {"idle": {"seconds": 190, "share": 0.92, "gpu_idle_seconds": 0,
                                   "top_stacks": stacks}}}
    found = recs(s, phases, kinds={pid_id(s): kind})
    assert by_rule(found, "idle_server") == []
    [rec] = by_rule(found, "idle_gpu_held")
    assert "shut its kernel down (or ask its user)" in rec.action["text"], rec.action
    assert "is lost" in rec.action["text"], rec.action
    assert rec.savings_per_month > 0


def test_a_server_a_kernel_runs_in_a_cell_still_serves():
    """What the kernel's ports no longer count for: a server started from a cell (uvicorn's
    loop in a thread, accepting on its port) is still a server, never offered the SIGTERM."""
    kind = classify_kind(IPYKERNEL, kernel_facts(listening_ports=(33077, 42129, 44791, 7860)),
                         {"server_loop": 1200.0, "ipykernel": 1200.0}, now=1201.0,
                         gpu_use="idle")
    assert kind.serves is True, kind
    # under jupyter-lab, with ipykernel's frames: a notebook by its score, serving all the same
    # (it read notebook, serves False, and kept idle_gpu_held's SIGTERM)
    lab = classify_kind(IPYKERNEL, kernel_facts(listening_ports=(33077, 42129, 44791, 7860),
                                                parent="jupyter"),
                        {"server_loop": 1200.0, "ipykernel": 1200.0}, now=1201.0,
                        gpu_use="idle")
    assert lab.kind == NOTEBOOK and lab.serves is True, lab


def test_a_tie_between_serving_and_a_notebook_goes_to_serving_by_rule_not_by_order():
    """Equal scores: the kind that is never stopped (online inference) wins, as an explicit
    preference, whatever the order of KINDS."""
    from daemon.analysis import kinds as kinds_module

    facts = KindFacts(listening_ports=(8000,), accepted_seen_at=1000.0, accepted_connections=1,
                      accepted_reads=3, prompt="bare")
    kind = classify_kind("python", facts, {}, now=1201.0, gpu_use="idle")
    assert kind.scores[ONLINE_INFERENCE] == kind.scores[NOTEBOOK], kind.scores
    assert kind.kind == ONLINE_INFERENCE, kind
    original = kinds_module.KINDS
    try:
        kinds_module.KINDS = (kinds_module.NOTEBOOK, *(k for k in original
                                                       if k != kinds_module.NOTEBOOK))
        again = classify_kind("python", facts, {}, now=1201.0, gpu_use="idle")
    finally:
        kinds_module.KINDS = original
    assert again.kind == ONLINE_INFERENCE, again
