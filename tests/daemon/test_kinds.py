"""Workload kinds from facts (daemon.analysis.kinds), the bounded /proc reader of those facts
(daemon.sources.kindfacts), and the rule that follows: a server is never offered SIGTERM."""

import os
import socket
import subprocess
import sys
from dataclasses import replace

import psutil
import pytest
from simhost import poll
from test_rules import CATALOG, P4D, by_rule, phases_for, pid_id, window

import daemon.runtime.kinds as runtime_kinds
from daemon.analysis.kinds import (
    BATCH_INFERENCE,
    NOTEBOOK,
    ONLINE_INFERENCE,
    OTHER,
    TRAINING,
    Kind,
    classify_kind,
    frame_markers,
    gpu_use_shape,
)
from daemon.analysis.rules import build_analysis, evaluate
from daemon.analysis.rules.thresholds import INFERENCE_COMMAND
from daemon.analysis.rules.window import is_inference
from daemon.runtime.kinds import GPU_USE_READS, KindTracker
from daemon.sources.frames import Frame, ThreadStack
from daemon.sources.kindfacts import (
    PROMPT_BARE,
    PROMPT_INSPECT,
    PROMPT_SHELL,
    KindFacts,
    KindFactsReader,
    fd_count,
    libraries_in_maps,
    parent_marker,
    parse_tcp_table,
    prompt_of,
    read_sockets,
    read_unix_listening,
    stdin_is_terminal,
)

NOW = 1_000_000.0


def thread(*frames, main=False):
    return ThreadStack(1 if main else 2, "MainThread" if main else "http", False,
                       tuple(Frame(name, filename, 1) for name, filename in frames))


def test_a_listening_server_serving_in_a_thread_is_online_inference_and_serves():
    facts = KindFacts(listening_ports=(8080,), libraries=("torch",))
    markers = frame_markers([
        thread(("Thread.join", "/usr/lib/python3.11/threading.py"), main=True),
        thread(("BaseSelector.select", "/usr/lib/python3.11/selectors.py"),
               ("BaseServer.serve_forever", "/usr/lib/python3.11/socketserver.py"))])
    assert "serve_forever" in markers
    kind = classify_kind("python app.py", facts, dict.fromkeys(markers, NOW), now=NOW)
    assert kind.kind == ONLINE_INFERENCE and kind.serves
    assert "listens on TCP port 8080" in kind.evidence
    assert kind.confidence > 0.5


def test_accepted_connections_alone_make_a_listener_a_server():
    facts = KindFacts(listening_ports=(9000,), accepted_connections=2,
                      accepted_seen_at=NOW - 60, accepted_reads=3)
    kind = classify_kind("python main.py", facts, {}, now=NOW)
    assert kind.kind == ONLINE_INFERENCE and kind.serves
    assert any("accepted connections" in e for e in kind.evidence)
    # Served long ago (beyond the window) and no serving frame: it listens, but has not served.
    old = classify_kind("python main.py", KindFacts(listening_ports=(9000,),
                                                    accepted_seen_at=NOW - 7200), {}, now=NOW)
    assert old.kind == ONLINE_INFERENCE and not old.serves


def test_training_from_frames_and_launcher_even_when_rank_zero_listens():
    # torchrun's rank 0 listens on the rendezvous store's port: still training.
    facts = KindFacts(listening_ports=(29500,), accepted_connections=1, accepted_seen_at=NOW,
                      accepted_reads=1, parent="torchrun", libraries=("nccl", "torch"))
    markers = frame_markers([thread(("backward", "/x/torch/autograd/__init__.py"),
                                    ("step", "/x/torch/optim/adamw.py"), main=True)])
    kind = classify_kind("python train_lm.py", facts, dict.fromkeys(markers, NOW), now=NOW)
    assert kind.kind == TRAINING
    assert "started by torchrun" in kind.evidence


def test_training_from_its_loop_and_checkpoint_functions():
    markers = frame_markers([thread(("SlowVolume.write", "/srv/jobs/volume.py"),
                                    ("save_checkpoint", "/srv/jobs/run.py"), main=True),
                             thread(("train_step", "/srv/jobs/run.py"))])
    assert markers == {"checkpoint_save", "trainer_loop"}
    kind = classify_kind("python run.py", KindFacts(), dict.fromkeys(markers, NOW), now=NOW)
    assert kind.kind == TRAINING and kind.confidence > 0.8


def test_a_notebook_kernel_is_a_notebook_though_its_channels_listen():
    facts = KindFacts(listening_ports=(50001, 50002), accepted_connections=3,
                      accepted_seen_at=NOW, accepted_reads=2, parent="jupyter")
    kind = classify_kind("python -m ipykernel_launcher -f /run/kernel-4f2a.json", facts, {},
                         now=NOW)
    assert kind.kind == NOTEBOOK and not kind.serves


def test_batch_inference_from_runtime_libraries_and_generate_without_a_port():
    facts = KindFacts(libraries=("onnxruntime",))
    markers = frame_markers([thread(("Model.generate", "/x/transformers/generation/utils.py"),
                                    main=True)])
    kind = classify_kind("python run.py", facts, dict.fromkeys(markers, NOW), now=NOW)
    assert kind.kind == BATCH_INFERENCE and not kind.serves


# A queue consumer's sampled stack, as the phase classifier reads it (phases.py, stack_rules.py):
# the marker attribution leaves for it (job_wait_marker), with when it was seen.
REDIS_WAIT = {"job_wait:redis": NOW}


def test_a_job_consumer_is_batch_inference_not_training():
    """A worker between jobs: its GPU bursts when a job comes, no port, and its sampled stacks
    wait for its next job. Its GPU use alone reads training (a job); the wait makes it a
    consumer, batch inference, with the evidence saying from what. A wait seen over 30 min
    ago counts no more."""
    worker = classify_kind("python worker.py --server 127.0.0.1:6379", KindFacts(),
                           REDIS_WAIT, now=NOW, gpu_use="bursty", kernels_at=NOW)
    assert worker.kind == BATCH_INFERENCE and worker.confidence > 0.5, worker
    assert not worker.serves
    assert any(e.startswith("waits for its next job from a redis queue") for e in
               worker.evidence), worker.evidence
    old = classify_kind("python worker.py", KindFacts(), {"job_wait:redis": NOW - 1801.0},
                        now=NOW, window_s=1800.0, gpu_use="bursty", kernels_at=NOW)
    assert old.kind == TRAINING, old
    named = classify_kind("python train_worker.py", KindFacts(), REDIS_WAIT, now=NOW,
                          gpu_use="steady")
    assert named.kind == BATCH_INFERENCE, named.scores  # 'train' in a name: weaker than the wait


def test_stronger_evidence_than_a_job_wait_keeps_its_kind():
    """A job wait is outweighed by what says a kind outright: a server that listens and
    serves, a notebook kernel, a training framework's frames, a distributed launcher."""
    server = classify_kind("python app.py", KindFacts(listening_ports=(8000,),
                                                      accepted_connections=2,
                                                      accepted_seen_at=NOW, accepted_reads=3),
                           REDIS_WAIT, now=NOW, gpu_use="bursty")
    assert server.kind == ONLINE_INFERENCE and server.serves, server.scores
    kernel = classify_kind("python -m ipykernel_launcher -f /run/kernel-4f2a.json", KindFacts(),
                           REDIS_WAIT, now=NOW, gpu_use="bursty")
    assert kernel.kind == NOTEBOOK, kernel.scores
    markers = frame_markers([thread(("Tensor.backward", "/x/torch/_tensor.py"),
                                    ("Optimizer.zero_grad", "/x/torch/optim/optimizer.py"),
                                    main=True)])
    trainer = classify_kind("python worker.py", KindFacts(),
                            {**dict.fromkeys(markers, NOW), **REDIS_WAIT}, now=NOW,
                            gpu_use="bursty")
    assert trainer.kind == TRAINING, trainer.scores  # a queue worker running training jobs
    rank = classify_kind("python worker.py", KindFacts(parent="torchrun"), REDIS_WAIT,
                         now=NOW, gpu_use="bursty")
    assert rank.kind == TRAINING, rank.scores


def test_job_wait_markers_name_where_from_in_our_words_only():
    """The marker of a phase reason: from our words at its head, never from the quoted line,
    the function or the file of the process (a sleep line that mentions SQS in a folder
    watcher is a folder watcher); no marker for a reason that is no job wait."""
    from daemon.analysis.kinds import JOB_WAIT_FROM, job_wait_marker
    from daemon.analysis.stack_rules import JOB_WAIT

    cases = {
        f"{JOB_WAIT} from a redis list (BLPOP)": "job_wait:redis",
        f"{JOB_WAIT} from a Celery broker (its worker's event loop, kombu)": "job_wait:celery",
        f"{JOB_WAIT} from an SQS queue it receives from (`sqs.receive_message(...)`, x.py)":
            "job_wait:sqs",
        f"{JOB_WAIT} from a folder it polls: sleeping (`time.sleep(1)  # SQS redis`) between":
            "job_wait:folder",
        f"{JOB_WAIT} on a FIFO nothing came to (`for line in jobs:`; ...)": "job_wait:pipe",
        f"{JOB_WAIT} on a socket nothing came to (an HTTP request whose answer has not begun, "
        "HTTPResponse._read_status in client.py; ...)": "job_wait:http",
        f"{JOB_WAIT} on a socket nothing came to (`sock.recv(4096)`; ...)": "job_wait:socket",
        f"{JOB_WAIT} on a socket nothing came to (recv_into in /srv/sqs_redis_celery.py; ...)":
            "job_wait:socket",
        f"{JOB_WAIT} on a socket nothing came to (an HTTP request whose answer has not begun, "
        "take in /srv/redis_folder/pipe.py; ...)": "job_wait:http",
        f"{JOB_WAIT} in its asyncio event loop (select in selectors.py under ...)":
            "job_wait:asyncio",
        f"{JOB_WAIT} from its multiprocessing Pool's task queue": "job_wait:pool",
        f"{JOB_WAIT} from a folder it watches: blocked on an inotify descriptor (`os.read(fd, "
        "4096)  # SQS pipe`, ocr.py:78 main) until a file lands": "job_wait:folder",
        f"{JOB_WAIT} from a folder it watches with watchdog (its observer's thread 'redis SQS "
        "pipe', api.py:475 BaseObserver.dispatch_events, waits ...)": "job_wait:folder",
        "waiting in its asyncio event loop for a timer due within a minute (selectors.py:468 "
        "EpollSelector.select ...)": None,
        f"{JOB_WAIT} somewhere new": "job_wait:queue",
        "reading a pipe (`for line in jobs:`)": None,
        "waiting in select": None,
        "": None,
        None: None,
    }
    for reason, marker in cases.items():
        assert job_wait_marker(reason) == marker, reason
        if marker is not None:
            assert marker in JOB_WAIT_FROM


def test_job_wait_markers_from_a_phase_balance_above_a_small_share():
    """The markers come from a phase balance as the rules tell a queue consumer: its idle
    phase's top stacks waiting for its next job, at JOB_WAIT_MIN_SHARE of the window or more
    (the idle share times those stacks' part of its samples). A stray job-wait sample in a
    loop's idle phase, a balance with no idle phase or with other idle reasons: none."""
    from daemon.analysis.kinds import job_wait_markers
    from daemon.analysis.stack_rules import JOB_WAIT

    def balance(share, *stacks):
        return {"compute": {"share": 0.3, "top_stacks": [{"reason": "computing",
                                                          "samples": 50}]},
                "idle": {"share": share, "top_stacks": [{"reason": r, "samples": n}
                                                        for r, n in stacks]}}

    redis = f"{JOB_WAIT} from a redis list (BLPOP)"
    assert job_wait_markers(balance(0.6, (redis, 40))) == {"job_wait:redis"}
    assert job_wait_markers(balance(0.6, ("sleeping", 10), (redis, 10),
                                    (f"{JOB_WAIT} from an SQS queue it receives from", 5))
                            ) == {"job_wait:redis", "job_wait:sqs"}
    assert job_wait_markers(balance(0.01, (redis, 40))) == set()  # 1% of the window
    assert job_wait_markers(balance(0.1, ("sleeping", 99), (redis, 1))) == set()  # 0.1%
    assert job_wait_markers(balance(0.6, ("waiting in select", 40))) == set()
    assert job_wait_markers({"compute": {"share": 1.0, "top_stacks": []}}) == set()
    assert job_wait_markers({}) == set()


def test_nothing_observed_is_other_with_no_confidence():
    kind = classify_kind("python job.py", KindFacts(), {}, now=NOW)
    assert kind.kind == OTHER and kind.confidence == 0.0


def test_a_lone_command_line_hint_is_below_half_confidence():
    kind = classify_kind("python train.py", None, {}, now=NOW)
    assert kind.kind == TRAINING and kind.confidence <= 0.5


def test_an_option_naming_the_server_it_connects_to_makes_no_server():
    """`worker.py --server 127.0.0.1:6379` (the broker or job server it takes jobs from) read
    online_inference on the word "server", and its advice said "restart the server". The
    option's address names the server it is a client of; its own bursty GPU use makes it a
    job. A process that listens, one a serving launcher started, one named server.py, and a
    bare --serve flag stay servers."""
    for command in ("python worker.py --server 127.0.0.1:6379",
                    "python worker.py --job-server=render-farm.internal:7000 --step-ms 300",
                    "python worker.py --redis-server redis://infer-cache:6379/0",
                    "python worker.py --server [::1]:6379"):
        kind = classify_kind(command, KindFacts(), {}, now=NOW, gpu_use="bursty")
        assert kind.kind == TRAINING, (command, kind)
        assert "'serve' on its command line" not in kind.evidence, kind.evidence
        # nor does it stand in for a kind where nothing else points to one
        assert not is_inference(classify_kind(command, KindFacts(), {}, now=NOW), command,
                                INFERENCE_COMMAND), command
    worker = "python worker.py --server 127.0.0.1:6379"
    listening = classify_kind(worker, KindFacts(listening_ports=(8000,)), {}, now=NOW,
                              gpu_use="bursty")
    assert listening.kind == ONLINE_INFERENCE, listening
    launched = classify_kind(worker, KindFacts(parent="uvicorn"), {}, now=NOW, gpu_use="bursty")
    assert launched.kind == ONLINE_INFERENCE, launched
    for command in ("python server.py --server 0.0.0.0:8000", "python app.py --serve",
                    "vllm serve meta-llama/Llama-3.1-8B --port 8000"):
        assert classify_kind(command, KindFacts(), {}, now=NOW).kind == ONLINE_INFERENCE, command


def test_evidence_carries_no_text_of_the_process():
    hostile = "python \x1b]0;pwned\x07 serve.py"
    kind = classify_kind(hostile, KindFacts(listening_ports=(1,)), {}, now=NOW)
    assert not any("\x1b" in e or "pwned" in e for e in kind.evidence)


def test_tcp_table_rows_and_bad_rows():
    data = (b"  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
            b"   uid  timeout inode\n"
            b"   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000"
            b"     0        0 4242 1 0000000000000000 100 0 0 10 0\n"
            b"   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000"
            b"     0        0 4343 1\n"
            b"garbage line\n   2: zz:zz 00:00 0A 0 0 0 0 0 notanumber\n")
    assert parse_tcp_table(data) == [(8080, "0A", 4242), (8080, "01", 4343)]


def test_read_sockets_sees_this_process_listen_and_accept():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                ports, n_accepted, others, truncated = read_sockets(os.getpid())
    assert port in ports and n_accepted >= 1 and others >= 1 and truncated == []
    del client


def test_a_server_on_a_unix_socket_is_seen_listening_and_accepting(tmp_path):
    """Behind nginx or a sidecar, a server listens on a unix socket, not a port: it read as a
    job with 'no port it serves' (and its idle GPU was offered SIGTERM)."""
    path = str(tmp_path / "reranker.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        assert read_unix_listening(os.getpid()) == (1, frozenset(), False)
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)
            accepted, _ = server.accept()
            with accepted:
                listening, caught, cut = read_unix_listening(os.getpid())
                assert listening == 1 and not cut
                assert caught == {os.fstat(accepted.fileno()).st_ino}  # the client's is not
                me = (os.getpid(), psutil.Process().create_time())
                reader = KindFactsReader()
                reader.refresh([me], NOW)
                facts = reader.get(me)
    assert facts is not None and facts.unix_listening == 1 and facts.accepted_seen_at == NOW
    kind = classify_kind("python reranker.py", facts, {}, now=NOW, gpu_use="idle")
    assert kind.kind == ONLINE_INFERENCE and kind.serves, kind
    assert "listens on 1 unix socket" in kind.evidence
    quiet = classify_kind("python reranker.py", replace(facts, accepted_seen_at=None), {},
                          now=NOW, gpu_use="idle")  # none caught yet: still no job
    assert quiet.kind == ONLINE_INFERENCE, quiet


def test_reader_caches_by_process_and_rereads_only_when_due():
    me = (os.getpid(), psutil.Process().create_time())
    reader = KindFactsReader(sockets_every_s=10.0, maps_every_s=60.0)
    reader.refresh([me], NOW)
    assert reader.reads == 2  # sockets and maps, once each
    reader.refresh([me], NOW + 5)
    assert reader.reads == 2  # nothing due
    reader.refresh([me], NOW + 11)
    # sockets only: read, or answered from its unchanged descriptor count where it has none
    assert reader.reads + reader.fd_checks == 3
    reader.refresh([], NOW + 12)
    assert reader.get(me) is None  # forgotten with the process


def test_processes_found_together_are_re_read_spread_over_the_rounds():
    """Processes found in one round (a job's ranks) came due together every 10 s, and that
    round read all their sockets (3.9-6.5 ms at 256 processes, every fifth round): each round
    re-reads its share of them instead, the longest unread first, and none waits past a period
    and a round once they are spread."""
    pid = os.getpid()
    keys = [(pid, float(i)) for i in range(50)]  # one process read as 50: the reads are real
    reader = KindFactsReader(sockets_every_s=10.0, maps_every_s=60.0)
    reader.refresh(keys, NOW)
    assert reader.reads == 100  # found: sockets and maps of each, at once
    per_round = []

    def done():  # re-reads made, or answered from an unchanged descriptor count (no sockets)
        return reader.reads + reader.fd_checks

    for i in range(1, 61):  # 2 minutes of rounds, one every 2 s
        now = NOW + 2 * i
        before = done()
        reader.refresh(keys, now)
        per_round.append(done() - before)
        ages = [now - facts.sockets_read_at for facts in map(reader.get, keys) if facts]
        assert len(ages) == 50 and min(ages) >= 0
        if i >= 10:  # spread by then
            assert max(ages) <= 10.0 + 2.0
    # 50 re-reads every 10 s (and 50 of the maps every 60 s), never all in one round: at most
    # 13 of the sockets (50 x 2 s / 10 s, and a quarter) and 3 of the maps a round
    assert max(per_round) <= 13 + 3
    assert 50 * 12 - 60 <= sum(per_round) <= 50 * 12 + 60 + 100
    assert sum(per_round) == done() - 100


def test_maps_and_parent_markers():
    maps = (b"7f00-7f01 r-xp 0 08:01 1 /opt/venv/lib/python3.11/site-packages/torch/lib/"
            b"libtorch_cuda.so\n7f02-7f03 r-xp 0 08:01 2 /opt/venv/lib/python3.11/"
            b"site-packages/vllm/_C.abi3.so\n7f04-7f05 rw-p 0 0 0 [heap]\n")
    assert libraries_in_maps(maps) == ("torch", "vllm")
    assert parent_marker(b"/usr/bin/python3\0/usr/local/bin/torchrun\0--nproc=8") == "torchrun"
    assert parent_marker(b"bash\0-c\0sleep 1") is None


def kinds_for(samples, kind):
    return {pid_id(samples): kind}


def test_an_idle_server_gets_scale_to_zero_advice_never_sigterm():
    quiet = [0.0] * 8
    samples = window(n=61, utils=quiet, holders={0: 0.0}, command="python app.py")
    server = classify_kind("python app.py", KindFacts(listening_ports=(8000,)),
                           {"serve_forever": samples[-1].ts}, now=samples[-1].ts)
    assert server.serves
    found = evaluate(build_analysis(samples, phases_for(samples, idle=0.95), P4D, CATALOG,
                                    host_cpus=32, kinds=kinds_for(samples, server)))
    assert by_rule(found, "idle_gpu_held") == []
    [rec] = by_rule(found, "idle_server")
    assert "scale it to zero" in rec.summary and "8000" in rec.summary
    assert all(r.action.get("kind") != "sigterm" for r in found)


def test_a_rank_holding_its_one_peer_connection_is_not_told_to_scale_to_zero():
    """Probe 132 L1: a hand-rolled rank (no torch frames, no rank argument) listens, accepts
    its peer from another process and blocks in conn.recv(): all it accepted is one
    connection, open at every read. It stays a server (never the SIGTERM: a server with one
    client reads the same), but idle_server no longer says "scale pid N to zero between
    requests": it says both and asks to look at the other end first. A server that accepted
    several connections, or shows its serving loop, is still told to scale to zero."""
    samples = window(n=61, utils=[0.0] * 8, holders={0: 0.0}, command="python rank0.py")
    now = samples[-1].ts
    peer = KindFacts(listening_ports=(29532,), accepted_connections=1, accepted_reads=12,
                     accepted_seen_at=now, connections_caught=1,
                     first_sockets_read_at=now - 600, sockets_read_at=now,
                     unsettled_accepted=frozenset({4711}))
    for facts, frames, held in ((peer, {"accept": now - 590}, True),
                                (replace(peer, connections_caught=3), {}, False),
                                (replace(peer, accepted_reads=1), {}, False),
                                (peer, {"serve_forever": now}, False)):
        kind = classify_kind("python rank0.py", facts, frames, now=now)
        assert kind.serves and kind.one_held_connection is held, (facts, frames, kind)
        found = evaluate(build_analysis(samples, phases_for(samples, idle=0.95), P4D, CATALOG,
                                        host_cpus=32, kinds=kinds_for(samples, kind)))
        assert by_rule(found, "idle_gpu_held") == []
        assert all(r.action.get("kind") != "sigterm" for r in found)
        [rec] = by_rule(found, "idle_server")
        assert rec.evidence["one_held_connection"] is held
        if held:
            assert "scale" not in rec.headline and "to zero" not in rec.headline, rec.headline
            assert rec.headline.endswith("with one connection open: a rank waiting for its "
                                         "peer, or a server with one client?"), rec.headline
            assert "a distributed job's rank waiting for its peer" in rec.summary, rec.summary
            assert "ss -tnp | grep 'pid=42,'" in rec.action["text"], rec.action
        else:
            assert rec.headline.startswith("scale pid 42 to zero between requests"), rec.headline
            assert "scale it to zero between requests" in rec.summary, rec.summary


def idle_server_advice(facts, request_counters=None):
    samples = window(n=61, utils=[0.0] * 8, holders={0: 0.0}, command="python app.py")
    server = classify_kind("python app.py", facts, {"serve_forever": samples[-1].ts},
                           now=samples[-1].ts)
    found = evaluate(build_analysis(samples, phases_for(samples, idle=0.95), P4D, CATALOG,
                                    host_cpus=32, kinds=kinds_for(samples, server),
                                    request_counters=request_counters))
    [rec] = by_rule(found, "idle_server")
    return rec, rec.evidence["requests"], rec.evidence["process"]["burn_per_hour"]


def test_an_idle_servers_request_rate_from_its_configured_counter():
    """A [[cost.unit_costs]] counter of requests for its job: the rate and the cost per 1k
    requests it measured, in the advice."""
    counter = {"target": "app.py", "unit": "requests", "per": 1000.0, "units": 120.0,
               "seconds": 600.0, "units_per_second": 0.2, "unit_cost": 5.5, "spend": 0.66,
               "metric": "http_requests_total"}
    rec, requests, _ = idle_server_advice(KindFacts(listening_ports=(8000,)), {"app.py": counter})
    assert requests["source"] == "request counter" and requests["bound"] == "measured"
    assert requests["requests_per_minute"] == pytest.approx(12.0)
    assert requests["cost_per_1k_requests"] == pytest.approx(5.5)
    assert "12 requests/min at $5.50 per 1k requests" in rec.summary
    assert "http_requests_total" in rec.summary


def test_an_idle_servers_request_rate_from_caught_connections_is_a_bound():
    facts = KindFacts(listening_ports=(8000,), accepted_seen_at=NOW, accepted_reads=3,
                      connections_caught=6, first_sockets_read_at=NOW - 600,
                      sockets_read_at=NOW)
    rec, requests, burn = idle_server_advice(facts)
    assert requests["source"] == "socket reads"
    assert requests["requests_per_minute"] == pytest.approx(0.6)  # 6 in 10 min, at least
    assert requests["cost_per_1k_requests"] == pytest.approx(burn / 36 * 1000)
    assert "at least 0.6 requests/min, so at most" in rec.summary


def test_an_idle_server_whose_requests_no_read_caught_says_how_to_measure_them():
    rec, requests, _ = idle_server_advice(KindFacts(listening_ports=(8000,)))
    assert requests["bound"] == "not measured" and requests["requests_per_minute"] is None
    assert "request rate not measured" in rec.summary and "[[cost.unit_costs]]" in rec.summary
    assert rec.action["kind"] != "sigterm"


def test_reads_count_each_accepted_connection_once_and_new_ones_again():
    """A keep-alive connection open at two reads is one; a new one at the next read adds."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    reader = KindFactsReader(sockets_every_s=0.0)
    me = (os.getpid(), psutil.Process().create_time())
    first = socket.create_connection(("127.0.0.1", port))
    accepted = [server.accept()[0]]
    try:
        reader.refresh([me], NOW)
        reader.refresh([me], NOW + 10)
        kept = reader.get(me)
        second = socket.create_connection(("127.0.0.1", port))
        accepted.append(server.accept()[0])
        reader.refresh([me], NOW + 20)
        again = reader.get(me)
    finally:
        for sock in (*accepted, first, server):
            sock.close()
        second.close()
    assert kept is not None and again is not None
    assert kept.connections_caught == 1 and kept.first_sockets_read_at == NOW
    assert again.connections_caught == 2
    kind = classify_kind("python app.py", again, now=NOW + 20)
    assert (kind.connections_caught, kind.connections_over_s) == (2, 20.0)


# A process that opens a listening socket when told: "listen" adds a descriptor, "swap" closes
# a file it holds as it opens one (its descriptor count stays the same). Prints the port.
SOCKET_LATER = """
import socket, sys
held = open(sys.executable, "rb")
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "swap":
        held.close()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    print(server.getsockname()[1], flush=True)
"""
# The same, holding unix sockets from its start, as a CUDA process does (no TCP table has them).
UNIX_THEN_SOCKET_LATER = "import socket\npair = socket.socketpair()\n" + SOCKET_LATER


@pytest.fixture(params=[SOCKET_LATER, UNIX_THEN_SOCKET_LATER], ids=["no socket", "unix sockets"])
def socket_later(request):
    child = subprocess.Popen([sys.executable, "-c", request.param], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        # Linux 6.2+ counts a process's descriptors; before, the count reads 0 and every due
        # re-read lists them (what the tests below then check instead)
        counts = fd_count(child.pid) > 0
        yield child, (child.pid, psutil.Process(child.pid).create_time()), counts
    finally:
        child.kill()
        child.wait()


def tell(child, what):
    """Have the child open its listening socket; returns its port once it listens."""
    child.stdin.write(what + "\n")
    child.stdin.flush()
    return int(child.stdout.readline())


def test_a_process_without_sockets_is_re_read_once_its_descriptor_count_moves(socket_later):
    """A due re-read of a process whose last read found no TCP socket (none, or unix ones
    only: on an H200 host 64 CUDA processes were listed every 10 s, 2.8 ms a tick) is answered
    from its descriptor count while that is the same; a socket it opens adds one, and is read."""
    child, key, counts = socket_later
    reader = KindFactsReader(sockets_every_s=10.0, maps_every_s=60.0)
    reader.refresh([key], NOW)
    assert reader.reads == 2 and reader.get(key).listening_ports == ()
    reader.refresh([key], NOW + 11)
    # the same count: nothing to read (a kernel that does not count: read)
    assert (reader.reads, reader.fd_checks) == ((2, 1) if counts else (3, 0))
    assert reader.get(key).sockets_read_at == NOW + 11  # ... and its next turn in 10 s
    port = tell(child, "listen")
    reader.refresh([key], NOW + 22)
    listed = reader.reads
    assert listed == (3 if counts else 4) and reader.get(key).listening_ports == (port,)
    reader.refresh([key], NOW + 33)  # it has a socket now: read each time it is due
    assert (reader.reads, reader.fd_checks) == (listed + 1, 1 if counts else 0)


def test_a_socket_opened_as_a_file_closes_is_found_within_the_maps_period(socket_later):
    """A listening socket opened as a file closed leaves the descriptor count the same: the
    descriptors are listed again once the last listing is maps_every_s old, so a server is
    never taken for a job that serves nothing for longer than that."""
    child, key, counts = socket_later
    reader = KindFactsReader(sockets_every_s=10.0, maps_every_s=60.0)
    reader.refresh([key], NOW)
    port = tell(child, "swap")
    for i in range(1, 6):
        reader.refresh([key], NOW + 11 * i)
    if counts:
        assert reader.get(key).listening_ports == ()  # answered from the count, 5 times
        assert (reader.reads, reader.fd_checks) == (2, 5)
    else:  # listed at every due re-read: found at the first
        assert reader.get(key).listening_ports == (port,)
        assert reader.fd_checks == 0
    reader.refresh([key], NOW + 66)
    assert reader.get(key).listening_ports == (port,)


@pytest.mark.parametrize("kind", [Kind(NOTEBOOK, 0.8), Kind(TRAINING, 0.4), Kind()])
def test_a_notebook_or_stopped_job_keeps_its_sigterm(kind):
    quiet = [0.0] * 8
    samples = window(n=61, utils=quiet, holders={0: 0.0})
    found = evaluate(build_analysis(samples, phases_for(samples, idle=0.95), P4D, CATALOG,
                                    host_cpus=32, kinds=kinds_for(samples, kind)))
    [rec] = by_rule(found, "idle_gpu_held")
    assert rec.action["kind"] == "sigterm"
    assert by_rule(found, "idle_server") == []


def test_a_server_waiting_for_requests_gets_no_dataloader_advice():
    samples = window(n=61, command="python app.py")
    server = classify_kind("python app.py", KindFacts(listening_ports=(8000,)),
                           {"serve_forever": samples[-1].ts}, now=samples[-1].ts)
    phases = phases_for(samples, data_wait=0.5, compute=0.5)
    assert by_rule(evaluate(build_analysis(samples, phases, P4D, CATALOG, host_cpus=32)),
                   "dataloader_starvation")  # without its kind: the old advice
    found = evaluate(build_analysis(samples, phases, P4D, CATALOG, host_cpus=32,
                                    kinds=kinds_for(samples, server)))
    assert by_rule(found, "dataloader_starvation") == []


def test_the_report_shows_recorded_kinds_and_treats_the_store_as_data():
    from daemon.commands.report import _kind_json, _render_kinds

    recorded = _kind_json({"kind": "online_inference\x1b[2J", "kind_confidence": 0.85,
                           "kind_evidence": ["listens on TCP port 8000", 7, "x" * 500],
                           "serves": True})
    assert recorded["kind_evidence"][0] == "listens on TCP port 8000"
    assert len(recorded["kind_evidence"]) == 2 and len(recorded["kind_evidence"][1]) <= 200
    assert "\x1b" not in recorded["kind"]
    assert _kind_json("not a dict") == {"kind": None, "kind_confidence": None,
                                        "kind_evidence": [], "serves": False}
    text = "\n".join(_render_kinds([{"pid": 7, "gpus": [0], **recorded}]))
    assert "7 online_inference" in text and "85% sure" in text
    assert "serves: never offered SIGTERM: listens on TCP port 8000" in text


def test_one_tcp_table_read_per_network_namespace_per_round():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        tables: dict = {}
        first = read_sockets(os.getpid(), tables)
        assert len(tables) == 1  # this process's namespace, read once
        [netns] = tables
        tables[netns] = ([], [])  # what the cache holds is what a second read of the round sees
        again = read_sockets(os.getpid(), tables)
        fresh = read_sockets(os.getpid(), {})
    assert port in first[0] and again[0] == () and port in fresh[0]


def test_gpu_use_shape_from_reads_of_its_kernels():
    assert gpu_use_shape([True] * 4) is None  # too few reads to say
    assert gpu_use_shape([True] * 9 + [False]) == "steady"
    assert gpu_use_shape([True, False, False, True, False, False]) == "bursty"
    assert gpu_use_shape([False] * 8) == "idle"


def test_gpu_use_without_a_port_is_a_weak_sign_of_a_job_below_any_named_evidence():
    job = classify_kind("python persist.py", None, gpu_use="steady")
    assert job.kind == TRAINING and job.confidence < 0.5
    assert any("steady GPU use" in e for e in job.evidence)
    starved = classify_kind("python persist.py", None, gpu_use="bursty")  # waits for input
    assert starved.kind == TRAINING and starved.confidence < 0.5
    # A name saying inference outweighs it; a port makes it no job; idle use says nothing.
    assert classify_kind("python embed_docs.py", None, gpu_use="steady").kind == BATCH_INFERENCE
    assert classify_kind("python app.py", KindFacts(listening_ports=(8000,)),
                         gpu_use="steady").kind == ONLINE_INFERENCE
    assert classify_kind("python persist.py", None, gpu_use="idle").kind == OTHER


def test_gpu_use_while_accepting_connections_is_request_driven():
    facts = KindFacts(listening_ports=(8000,), accepted_seen_at=NOW, accepted_reads=2)
    kind = classify_kind("python app.py", facts, now=NOW, gpu_use="bursty")
    assert kind.kind == ONLINE_INFERENCE and kind.serves
    assert any("request-driven" in e for e in kind.evidence)


class NoFacts:
    """A facts reader that reads nothing: the tracker's rounds on GPU use alone."""

    def refresh(self, keys, now):
        list(keys)

    def get(self, key):
        return None


def test_tracker_keeps_each_processs_gpu_use_and_forgets_gone_ones():
    tracker = KindTracker(NoFacts())
    me, other = (10, 1.0), (11, 2.0)
    for i in range(6):
        tracker.refresh([(10, 1.0, "python persist.py", {}), (11, 2.0, "python wait.py", {})],
                        {}, NOW + 2 * i, {me: 35.0, other: 0.0})
    kinds = {k.split(":")[0]: v for k, v in tracker.kinds.items()}
    assert kinds["10"].gpu_use == "steady" and kinds["10"].kind == TRAINING
    assert kinds["11"].gpu_use == "idle" and kinds["11"].kind == OTHER
    tracker.refresh([(11, 2.0, "python wait.py", {})], {}, NOW + 20, {other: 0.0})
    assert [k.split(":")[0] for k in tracker.kinds] == ["11"]
    assert set(tracker._processes) == {other}  # the gone process's reads are not kept


def test_the_shape_counts_kernels_at_any_tick_of_a_round_so_load_does_not_hide_them():
    """A job whose loop a loaded host stretches runs a kernel every few rounds; read one tick a
    round it looked idle (decode_frames.py flipped from training to other under --load). Told
    whether its kernels ran at any tick since the last round, its shape stays a job's."""
    quiet, loaded = KindTracker(NoFacts()), KindTracker(NoFacts())
    me = (10, 1.0)
    for i in range(12):
        # quiet: a kernel in every round; loaded: in one round of three, and never at the tick
        # the round reads its SM share from
        quiet.refresh([(10, 1.0, "python decode.py", {})], {}, NOW + 2 * i, {me: 20.0},
                      {me: True})
        loaded.refresh([(10, 1.0, "python decode.py", {})], {}, NOW + 2 * i, {me: 0.0},
                       {me: i % 3 == 0})
    [fast], [slow] = quiet.kinds.values(), loaded.kinds.values()
    assert (fast.gpu_use, slow.gpu_use) == ("steady", "bursty")
    assert fast.kind == slow.kind == TRAINING


def test_a_job_whose_loop_load_stretched_past_the_shapes_reads_is_still_a_job():
    """mmap_rows.py reads its rows through page faults; a loaded host stretched its loop so far
    that its kernels ran further apart than the shape's last GPU_USE_READS reads, and its kind
    went from training to other (nothing observed) between kernels. Its own kernels count for
    the markers' 30 minutes; a process that never ran one is still nothing."""
    tracker = KindTracker(NoFacts())
    job, waiter = (10, 1.0), (11, 2.0)
    rounds = GPU_USE_READS + 10
    for i in range(rounds):
        tracker.refresh([(10, 1.0, "python rows.py", {}), (11, 2.0, "python wait.py", {})], {},
                        NOW + 2 * i, {job: 0.0, waiter: 0.0}, {job: i == 0, waiter: False})
    kinds = {k.split(":")[0]: v for k, v in tracker.kinds.items()}
    assert kinds["10"].gpu_use == "idle"  # the last minute's reads saw no kernel of it ...
    assert kinds["10"].kind == TRAINING  # ... and it is the same job
    assert any("kernels of its own in the last 30 min" in e for e in kinds["10"].evidence)
    assert kinds["11"].kind == OTHER
    # Past the window, as a frame marker would, the old kernels no longer count.
    late = classify_kind("python rows.py", None, now=NOW + 1801, kernels_at=NOW)
    assert late.kind == OTHER
    assert classify_kind("python rows.py", None, now=NOW + 60, kernels_at=NOW).kind == TRAINING
    # A port makes it no job, whenever its kernels ran.
    assert classify_kind("python rows.py", KindFacts(listening_ports=(8000,)), now=NOW,
                         kernels_at=NOW).kind == ONLINE_INFERENCE


def test_a_rank_listening_for_its_peers_is_no_server():
    facts = KindFacts(listening_ports=(29500,), accepted_seen_at=NOW, accepted_reads=3)
    by_argument = classify_kind("python two_ranks.py --rank 0", facts, now=NOW)
    assert by_argument.kind == TRAINING and not by_argument.serves
    assert by_argument.listening_ports == ()
    assert any("for its peers" in e for e in by_argument.evidence)
    by_frames = classify_kind("python job.py", facts, {"collective": NOW}, now=NOW)
    assert by_frames.kind == TRAINING and not by_frames.serves
    # Without either sign the same facts are a server.
    assert classify_kind("python job.py", facts, now=NOW).serves


def test_collective_frames_in_any_thread_are_a_marker():
    c10d = thread(("barrier", "/usr/lib/python3/dist-packages/torch/distributed/"
                              "distributed_c10d.py"))
    mp = thread(("Barrier.wait", "/usr/lib/python3.11/threading.py"), main=True)
    assert "collective" in frame_markers([c10d])
    assert "collective" in frame_markers([mp])


def test_a_re_read_that_found_the_same_facts_classifies_nothing_anew(monkeypatch):
    """Sockets are re-read every 10 s per process: a reading that found what the last one did
    (only its read time moved) keeps the kind as it was, without running the classifier; one
    that found a new library classifies it again."""
    class Reader:
        facts = KindFacts(libraries=("torch",), sockets_read_at=NOW, maps_read_at=NOW)

        def refresh(self, keys, now):
            list(keys)

        def get(self, key):
            return self.facts

    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return classify_kind(*args, **kwargs)

    monkeypatch.setattr(runtime_kinds, "classify_kind", counted)
    reader = Reader()
    tracker = KindTracker(reader)
    procs = [(10, 1.0, "python train.py", {})]
    tracker.refresh(procs, {}, NOW)
    first = tracker.kinds["10:1.000"]
    reader.facts = replace(reader.facts, sockets_read_at=NOW + 10)  # read again: the same
    tracker.refresh(procs, {}, NOW + 10)
    assert len(calls) == 1 and tracker.kinds["10:1.000"] is first
    reader.facts = replace(reader.facts, libraries=("torch", "vllm"), maps_read_at=NOW + 20)
    tracker.refresh(procs, {}, NOW + 20)
    assert len(calls) == 2


def test_rounds_that_change_no_kind_keep_the_same_documents():
    """Most rounds classify nothing anew: the kinds and their documents stay the same objects
    (a /v1/now, a kinds record compare them by identity first), and so do the kinds classified
    again when their minute comes round and found the same; a kind that changes gets a new
    document."""
    tracker = KindTracker(NoFacts())
    procs = [(10, 1.0, "python persist.py", {}), (11, 2.0, "python wait.py", {})]
    job, waiter = (10, 1.0), (11, 2.0)
    for i in range(8):
        tracker.refresh(procs, {}, NOW + 2 * i, {job: 35.0, waiter: 0.0})
    documents, kinds = tracker.documents(), tracker.kinds
    assert documents["10:1.000"]["kind"] == TRAINING
    tracker.refresh(procs, {}, NOW + 16, {job: 35.0, waiter: 0.0})
    assert tracker.documents() is documents and tracker.kinds is kinds
    tracker.refresh(procs, {}, NOW + 60, {job: 35.0, waiter: 0.0})  # the next minute
    assert tracker.documents() is documents and tracker.kinds is kinds
    tracker.refresh(procs, {waiter: {"serve_forever": NOW + 60}}, NOW + 62,
                    {job: 35.0, waiter: 0.0})
    assert tracker.documents() is not documents
    assert tracker.documents()["11:2.000"]["kind"] == ONLINE_INFERENCE
    assert tracker.documents()["10:1.000"] is documents["10:1.000"]  # that kind did not change


# -- an interactive Python prompt holding a GPU ----------------------------------------------

PROMPTS = [
    (["python"], PROMPT_BARE),
    (["/usr/bin/python3.11", "-q"], PROMPT_BARE),
    (["python3", "-u", "-X", "dev", "-Wignore"], PROMPT_BARE),
    (["python", "-i"], PROMPT_INSPECT),
    (["python", "-i", "train.py"], PROMPT_INSPECT),  # runs it, then stays at the prompt
    (["python", "-ic", "import torch"], PROMPT_INSPECT),
    (["python", "-m", "IPython"], PROMPT_SHELL),
    (["/usr/bin/python3", "/usr/local/bin/ipython"], PROMPT_SHELL),  # a console script
    (["ipython"], PROMPT_SHELL),
    (["ipython", "-i", "setup_model.py"], PROMPT_SHELL),
    (["ptpython"], PROMPT_SHELL),
    # scripts, modules and programs read from stdin: no prompt
    (["python", "train.py"], None),
    (["python", "-W", "ignore", "train.py"], None),  # -W's value is no script
    (["python", "--", "train.py"], None),
    (["python", "-"], None),  # `python - < script.py`
    (["python", "-c", "import torch; torch.zeros(1).cuda()"], None),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node=8", "train.py"], None),
    (["python3", "-m", "ipykernel_launcher", "-f", "/run/kernel-4f2a.json"], None),
    (["ipython", "run.py"], None),  # runs the file and exits
    (["bash"], None),
    (["python\x1b]0;x\x07"], None),
    ([], None),
]


@pytest.mark.parametrize("argv, expected", PROMPTS, ids=[" ".join(a) or "empty" for a, _ in PROMPTS])
def test_an_interpreter_with_no_script_or_with_i_or_a_python_shell_is_a_prompt(argv, expected):
    assert prompt_of(argv) == expected


def test_a_prompt_is_a_notebook_with_evidence_that_says_why():
    """A REPL that ran a kernel then sat at its prompt was `training` (its kernels, no port)."""
    kind = classify_kind("python", KindFacts(prompt=PROMPT_BARE), now=NOW, gpu_use="bursty",
                         kernels_at=NOW)
    assert kind.kind == NOTEBOOK and kind.confidence > 0.5
    assert "an interactive Python prompt: an interpreter started with no script, its stdin a " \
           "terminal" in kind.evidence
    assert classify_kind("python", KindFacts(), now=NOW, gpu_use="bursty").kind == TRAINING


def _pty() -> tuple[int, int]:
    import pty

    return pty.openpty()


def test_stdin_is_a_terminal_only_where_the_link_names_one(tmp_path):
    """The link's text is read, never followed: a file whose path holds /dev/pts is no terminal."""
    fake = tmp_path / "dev" / "pts" / "0"
    fake.parent.mkdir(parents=True)
    fake.write_text("print('hi')\n")
    master, slave = _pty()
    children = []
    try:
        with open(fake) as as_file:
            for stdin in (slave, subprocess.PIPE, subprocess.DEVNULL, as_file):
                children.append(subprocess.Popen(["sleep", "60"], stdin=stdin))
        assert [stdin_is_terminal(c.pid) for c in children] == [True, False, False, False]
    finally:
        for child in children:
            child.kill()
            child.wait()
        os.close(master)
        os.close(slave)


def _kind_of(argv: list[str], stdin) -> Kind:
    """The kind mlcostd's tracker gives a real process started with `argv` and `stdin`, its
    kernels running (an SM share each round): the runtime path, facts read from /proc."""
    from daemon.sources.redact import redact_argv

    child = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        # its own command line, not its parent's: exec may not have happened yet (a loaded CI
        # machine read pytest's argv, whose script made it no prompt)
        poll(lambda: psutil.Process(child.pid).cmdline() == argv, 30, f"{argv} to start")
        key = (child.pid, psutil.Process(child.pid).create_time())
        tracker = KindTracker()
        for i in range(3):
            tracker.refresh([(child.pid, key[1], redact_argv(argv), {})], {}, NOW + 2 * i,
                            {key: 5.0})
        [kind] = tracker.kinds.values()
        return kind
    finally:
        child.kill()
        child.wait()


def test_a_real_python_prompt_on_a_terminal_is_a_notebook_a_script_is_not(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import time\ntime.sleep(60)\n")
    master, slave = _pty()
    try:
        for argv in ([sys.executable], [sys.executable, "-i"]):
            kind = _kind_of(argv, slave)
            assert kind.kind == NOTEBOOK, (argv, kind)
            assert any(e.startswith("an interactive Python prompt: ") for e in kind.evidence)
        # a script on a terminal, a program piped in, a bare interpreter reading a pipe
        with open(script) as piped:
            for argv, stdin in (([sys.executable, str(script)], slave),
                                ([sys.executable, "-"], piped),
                                ([sys.executable], subprocess.PIPE)):
                kind = _kind_of(argv, stdin)
                assert kind.kind == TRAINING, (argv, kind)
                assert not any("prompt" in e for e in kind.evidence)
    finally:
        os.close(master)
        os.close(slave)
