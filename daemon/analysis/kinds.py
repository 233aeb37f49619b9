"""The kind of a GPU workload — training, batch inference, online inference, notebook, other —
from facts observable without changing its code, with the evidence and a confidence.

Pure: `classify_kind` reads a process's command line (redacted), its sockets, mapped libraries,
parent and whether it is an interactive Python prompt (daemon.sources.kindfacts) and the frame
markers seen in any thread of its stacks
(`frame_markers`), and whether its phase balance waits for its next job (`job_wait_markers`:
a queue consumer, batch inference). Each fact adds weight to one kind; the kind with the most weight wins and
its confidence is its share of all the weight given (a lone weak hint stays below one half).
Evidence strings are built from our own words and numbers only (no text of the process).

The shape of its GPU use over time (`gpu_use_shape`: steady, bursty, idle, from whether its
kernels ran at each of the last reads) is evidence too: steady or bursty use without a port it
serves is a job (training, unless its runtime, frames or name say inference: the weight is below
any of those), and use while it accepts connections is request-driven serving. A job's own
kernels count within the same window as frame markers (`kernels_at`, when they last ran), not
only within the shape's last minute: a loaded host stretches a job's loop past the shape's reads
(mmap_rows.py, reading a table through page faults, flipped from training to other under
--load), and a kind is what a process is, not whether its GPU ran in the last minute.

A process is a server (`Kind.serves`) when it listens on a TCP port (or a unix socket: behind
nginx or a sidecar) and has served: a connection accepted on it was seen, or a serving frame (serve_forever, accept, an engine loop) in
any of its threads. Rules never offer SIGTERM to one (daemon.analysis.rules.idle). A rank of a
distributed job listens for its peers: its ports are no service where its stacks show
collectives, its command line a rank, or its connections link it to its own job's GPU processes
only (`peer_ports_only`: the slow rank of an mp.spawn job shows neither of the others).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from daemon.analysis.stack_rules import JOB_WAIT, waiting_stacks
from daemon.sources.frames import ThreadStack
from daemon.sources.kindfacts import PROMPT_BARE, PROMPT_INSPECT, PROMPT_SHELL, KindFacts
from daemon.sources.safe_text import one_line

TRAINING = "training"
BATCH_INFERENCE = "batch_inference"
ONLINE_INFERENCE = "online_inference"
NOTEBOOK = "notebook"
OTHER = "other"
KINDS = (TRAINING, BATCH_INFERENCE, ONLINE_INFERENCE, NOTEBOOK, OTHER)
INFERENCE_KINDS = (BATCH_INFERENCE, ONLINE_INFERENCE)
# Where a kind came from: classified from what the process shows, or set in the config.
OBSERVED = "observed"
CONFIGURED = "config"

# The function names that training loops are written with across the field (Keras/Flax
# `train_step`, Lightning `training_step`, torchvision references' `train_one_epoch`) and the
# checkpoint savers (HF Trainer `_save_checkpoint`, Lightning `save_checkpoint`).
TRAIN_FUNCTIONS = frozenset({"train_step", "training_step", "train_one_epoch", "train_epoch",
                             "train_loop", "_inner_training_loop"})
CHECKPOINT_FUNCTIONS = frozenset({"save_checkpoint", "_save_checkpoint", "async_save"})
# Frame markers: (marker, kind it points to, test on (function name, file name)).
SERVE_FRAMES = ("serve_forever", "accept", "server_loop", "engine_loop")
_FRAME_TESTS: tuple[tuple[str, str, Any], ...] = (
    ("optimizer_step", TRAINING,
     lambda n, f: "torch/optim/" in f or n.endswith(("zero_grad", "optimizer_step"))),
    ("backward", TRAINING, lambda n, f: "torch/autograd/" in f or n.endswith(".backward")
     or n == "backward"),
    ("trainer_loop", TRAINING, lambda n, f: n.endswith(("Trainer.train", "fit_loop.run"))
     or n.split(".")[-1] in TRAIN_FUNCTIONS or "lightning/pytorch/loops/fit_loop" in f),
    ("checkpoint_save", TRAINING, lambda n, f: n.split(".")[-1] in CHECKPOINT_FUNCTIONS
     or "torch/distributed/checkpoint/" in f),
    ("serve_forever", ONLINE_INFERENCE, lambda n, f: n.endswith("serve_forever")),
    ("accept", ONLINE_INFERENCE, lambda n, f: f.endswith("socket.py") and n.endswith("accept")),
    ("server_loop", ONLINE_INFERENCE, lambda n, f: any(
        part in f for part in ("uvicorn/", "aiohttp/web", "gunicorn/", "tornado/httpserver",
                               "grpc/_server"))),
    ("engine_loop", ONLINE_INFERENCE, lambda n, f: n.endswith(("run_busy_loop",
                                                              "run_engine_core"))
     or "text_generation_server/" in f),
    ("generate", BATCH_INFERENCE, lambda n, f: n.split(".")[-1] == "generate"),
    ("ipykernel", NOTEBOOK, lambda n, f: "ipykernel/" in f or "IPKernelApp" in n),
    # Ranks of a distributed job meeting their peers: torch.distributed collectives, or a
    # barrier between processes.
    ("collective", TRAINING, lambda n, f: "torch/distributed/" in f
     or (f.endswith("threading.py") and n.endswith("Barrier.wait"))),
)
FRAME_KIND = {marker: kind for marker, kind, _ in _FRAME_TESTS}
# Frame markers that point to no kind but to how a process runs its model: read by the
# inference audit (daemon.analysis.inference_audit), by file path of the frame.
RUNTIME_FRAMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm", ("/vllm/",)), ("tgi", ("text_generation_server/",)),
    ("tensorrt", ("/tensorrt/", "/tensorrt_llm/")), ("onnxruntime", ("/onnxruntime/",)),
    ("torch_compile", ("torch/_dynamo/", "torch/_inductor/")),
    ("bitsandbytes", ("/bitsandbytes/",)), ("awq", ("/awq/",)),
    ("gptq", ("/auto_gptq/", "/gptqmodel/")),
)
MAX_FRAMES_LOOKED_AT = 256  # per thread: a deep recursion is not read to its end

# A process whose phase balance waits for its next job (JOB_WAIT: a broker's queue, a job
# server's long poll, a pipe, a folder it watches), as rules/idle.py's waits_for_jobs tells a
# queue consumer (`job_wait_markers`: the daemon's rules round, from the balances it computes
# anyway), gets a marker "job_wait:<from>" beside its frame markers: a queue consumer serves
# jobs one after another, as a batch-inference worker does, not a training run. Where from, told by the words our own reasons put at their head (before
# any quoted line of the process), in the order looked for; the evidence gives our words only.
JOB_WAIT_MARKER = "job_wait:"
JOB_WAIT_SOURCES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("SQS",), "sqs", "an SQS queue"),
    (("Celery",), "celery", "a Celery broker"),
    (("redis",), "redis", "a redis queue or channel"),
    (("folder",), "folder", "a folder it watches"),
    (("asyncio event loop",), "asyncio", "connections it opened (an asyncio loop)"),
    (("Pool", "multiprocessing"), "pool",
     "a multiprocessing queue or pipe (a process pool's, a manager's, another process's)"),
    (("HTTP request",), "http", "a job server's long poll (HTTP)"),
    (("FIFO", "pipe"), "pipe", "a pipe"),
    (("socket",), "socket", "a socket (a job server or a broker)"),
)
JOB_WAIT_ELSE = ("queue", "a queue or a job server")
SOCKET_JOB_WAIT = f"{JOB_WAIT_MARKER}socket"  # (JOB_WAIT_SOURCES' bare socket)
JOB_WAIT_FROM = {f"{JOB_WAIT_MARKER}{slug}": words for _, slug, words in
                 (*JOB_WAIT_SOURCES, ((), *JOB_WAIT_ELSE))}

LIBRARY_KIND = {"vllm": ONLINE_INFERENCE, "tgi": ONLINE_INFERENCE, "sglang": ONLINE_INFERENCE,
                "triton_server": ONLINE_INFERENCE, "tensorrt": BATCH_INFERENCE,
                "onnxruntime": BATCH_INFERENCE}
PARENT_KIND = {"jupyter": NOTEBOOK, "torchrun": TRAINING, "deepspeed": TRAINING,
               "accelerate": TRAINING, "slurmstepd": TRAINING, "mpirun": TRAINING,
               "uvicorn": ONLINE_INFERENCE, "gunicorn": ONLINE_INFERENCE}
RANK_ARGUMENT = re.compile(r"--(local[_-]|node[_-])?rank[= ]\d", re.I)
COMMAND_HINTS: tuple[tuple[re.Pattern[str], str, float, str], ...] = (
    (re.compile(r"ipykernel|kernel-[\w-]+\.json|jupyter", re.I), NOTEBOOK, 4.0,
     "a Jupyter kernel command line"),
    (re.compile(r"torchrun|torch\.distributed\.(run|launch)|deepspeed", re.I), TRAINING, 3.0,
     "a distributed training launcher on its command line"),
    (re.compile(r"vllm|sglang|text-generation-launcher|tritonserver|torchserve|uvicorn|"
                r"gunicorn|api_server", re.I), ONLINE_INFERENCE, 2.0,
     "a serving program on its command line"),
    (RANK_ARGUMENT, TRAINING, 2.0, "a rank argument on its command line (one process of a "
     "distributed job)"),
    (re.compile(r"train|finetune|fine_tune|pretrain", re.I), TRAINING, 1.0,
     "'train' on its command line"),
    (re.compile(r"infer|predict|score|embed|batch_eval", re.I), BATCH_INFERENCE, 1.0,
     "'infer'/'predict'/'score' on its command line"),
    (re.compile(r"serve|server", re.I), ONLINE_INFERENCE, 1.0,
     "'serve' on its command line"),
)


# An option that names the server a process connects to, with that server's address:
# `--server 127.0.0.1:6379`, `--job-server=host:port`, `--redis-server redis://cache:6379/0`. The
# process is that server's client (a worker on its broker or job server), and the word "server"
# in the option says nothing of what it is itself; nor does an address's host name
# ("infer-svc", "trainer-0"). A bare `--serve` or `--server` flag with no address, a program
# named serve.py or server.py, a serving launcher (vllm serve, uvicorn) keep their hints, and a
# process that listens is seen listening (its sockets) whatever its command line says.
SERVER_ADDRESS_OPTION = re.compile(
    r"(?<!\S)--?[\w.-]*server[\w.-]*(?:=|\s+)"
    r"(?:[a-z][\w+.-]*://\S*|\[[0-9a-f:.]+\]:\d{1,5}|[\w.-]+:\d{1,5})(?!\S)", re.I)


@functools.lru_cache(maxsize=4096)
def without_server_addresses(command: str) -> str:
    """`command` less the options naming a server it connects to (SERVER_ADDRESS_OPTION);
    once per command line, as command_hints."""
    return SERVER_ADDRESS_OPTION.sub(" ", command)


@functools.lru_cache(maxsize=4096)
def command_hints(command: str) -> tuple[tuple[str, float, str], ...]:
    """(kind, weight, why) of each COMMAND_HINTS pattern the command line matches, less the
    options that name a server it connects to (`without_server_addresses`). A process's
    command line never changes and every round classifies every process again: the regexes run
    once per command (bounded: a host runs a few thousand distinct ones at most)."""
    own = without_server_addresses(command)
    return tuple((kind, weight, why) for pattern, kind, weight, why in COMMAND_HINTS
                 if pattern.search(own))


# A Jupyter kernel's own command line: ipykernel's launcher (`python -m ipykernel_launcher -f
# /…/jupyter/runtime/kernel-….json`, VS Code's `--f=…/kernel-v2-….json`), or any kernel given
# its connection file (`-f …/kernel-….json`). Such a kernel listens on its shell, control,
# stdin, iopub and heartbeat ports (TCP, or unix sockets with transport ipc) and its frontend
# connects to them: those ports are its frontend's, and its "requests" a person's cells, so
# they are not counted as serving (`classify_kind`). A server it runs in a cell still shows
# its serving frames (uvicorn, aiohttp... in a thread) and still serves. Narrower than the
# notebook hint of COMMAND_HINTS: a folder named jupyter/ says nothing of a process's ports.
JUPYTER_KERNEL_COMMAND = re.compile(
    r"\bipykernel_launcher\b|-m\s+ipykernel\b|(?<!\S)--?f[= ]\S*?\bkernel-[\w.-]+\.json\b")


@functools.lru_cache(maxsize=4096)
def jupyter_kernel_command(command: str) -> bool:
    """Whether `command` is a Jupyter kernel's (JUPYTER_KERNEL_COMMAND); once per command."""
    return JUPYTER_KERNEL_COMMAND.search(command) is not None


# Equal scores go to the kind earlier here: stated, not the order a dict was built in. A job
# before a consumer (training before batch inference: a job's GPU use and a consumer's job
# wait), a consumer before a server (batch before online: a worker with a port it never served
# on), and a server before a notebook (an interactive prompt that listens and has served, a
# person running a server from it: a server is never stopped from here).
TIE_ORDER = (TRAINING, BATCH_INFERENCE, ONLINE_INFERENCE, NOTEBOOK, OTHER)


# An interactive Python prompt holding a GPU (someone imported torch at `python`'s prompt and
# left) is the session a Jupyter kernel is: as much weight as a kernel's command line.
PROMPT_WEIGHT = 4.0
PROMPT_EVIDENCE = {
    PROMPT_BARE: "an interactive Python prompt: an interpreter started with no script, its "
                 "stdin a terminal",
    PROMPT_INSPECT: "an interactive Python prompt: an interpreter started with -i, its stdin a "
                    "terminal",
    PROMPT_SHELL: "an interactive Python prompt: an IPython/ptpython/bpython shell, its stdin a "
                  "terminal",
}
LISTEN_WEIGHT = 2.0
ACCEPTED_WEIGHT = 2.0
SERVE_FRAME_WEIGHT = 3.0
FRAME_WEIGHT = 3.0
LIBRARY_WEIGHT = 1.5
PARENT_WEIGHT = 3.0
# GPU-use shape: steady when its kernels ran at >= STEADY_MIN of at least SHAPE_MIN_READS reads;
# bursty when at some but fewer. Kernels of its own without a port are a weak sign of a job
# (below a command-line hint).
STEADY = "steady"
BURSTY = "bursty"
IDLE_USE = "idle"
STEADY_MIN = 0.7
SHAPE_MIN_READS = 5
JOB_WEIGHT = 0.5
# Waits for its next job (a job_wait marker in the window): above its GPU use's job (0.5) with
# 'train' on its command line (1.0), so a consumer named train_worker.py is still a consumer;
# below what says training outright (a training framework's frames, 3.0 each; a launcher, 3.0;
# started by torchrun, 3.0; a rank argument with its GPU use, 2.5), what says it serves (listens
# and accepts, 4.0; serving frames where it listens, 3.0 more) and a notebook (a kernel's command
# line or a prompt, 4.0). Ties go to batch_inference (the order of KINDS): a worker with a port
# it never served on.
JOB_WAIT_WEIGHT = 2.0
SOCKETS_UNKNOWN_EVIDENCE = (
    "whether it listens on a port is not known: a socket table (TCP or UDP) of its network "
    "namespace is longer than mlcostd reads (1 MiB, thousands of sockets: a busy host, or a "
    "user who opened thousands), and some of its sockets were not in the part read")
PARENT_SOCKETS_UNKNOWN = ("whether it listens on a port is not known (a socket table of its "
                          "network namespace is longer than mlcostd reads)")
REQUEST_DRIVEN_WEIGHT = 1.0


@dataclass(frozen=True)
class Kind:
    """A process's kind, how sure (0..1), why, and whether it serves."""

    kind: str = OTHER
    confidence: float = 0.0
    evidence: tuple[str, ...] = ()
    serves: bool = False  # listens and has served: never offered SIGTERM
    listening_ports: tuple[int, ...] = ()
    scores: Mapping[str, float] = field(default_factory=dict)
    gpu_use: str | None = None  # its GPU use's shape (gpu_use_shape); None: too few reads
    source: str = OBSERVED  # OBSERVED (classified) or CONFIGURED ([kinds.jobs] of the config)
    # Distinct connections accepted on its ports that the socket reads caught, over how many
    # seconds of reads (KindFacts.connections_caught): a lower bound of its requests.
    connections_caught: int = 0
    connections_over_s: float | None = None
    # TCP connections it opened (ESTABLISHED, not on a port it listens on: to a job server, a
    # coordinator, a peer) at the last socket read: a process waiting on them waits for whoever
    # is at the other end (rules/idle.py looks first).
    peer_connections: int = 0
    # Its parent's pid where the parent listens on a TCP port and has served a connection from
    # outside its job (runtime/kinds.py reads it as it reads its own sockets): this process is
    # that server's worker (a GPU worker fed over a pipe). 0: none, or no such parent.
    serving_parent: int = 0
    # It serves, but all it ever accepted is one connection, open at every socket read that
    # found one, two or more (`held_connection`): a distributed job's rank whose peer
    # connected to it and sends nothing yet (a hand-rolled or non-torch rank: no collective
    # frames, no rank argument, a peer outside its job's GPU processes) reads the same as a
    # server whose one client holds its connection. No socket read tells them apart, so it
    # stays a server (never offered SIGTERM), and idle_server says both, not "scale to zero".
    one_held_connection: bool = False
    # Whether it (or the parent it may work for) may listen on a port no read could see: a
    # TCP table of its namespace was cut (KindFacts.sockets_unknown). Never offered SIGTERM.
    sockets_unknown: bool = False
    # UDP ports it serves on (KindFacts.udp_ports): a UDP server shows no connection, so one
    # that listens serves.
    udp_ports: tuple[int, ...] = ()
    unix_listening: int = 0  # unix sockets it listens on (KindFacts.unix_listening)
    # Its unconnected UDP sockets on all addresses on a port in the ephemeral range
    # (KindFacts.udp_wildcard_ports): a client's or a server's. Waiting on its sockets, it may
    # be serving datagrams (rules/idle.py looks first).
    udp_wildcard_ports: tuple[int, ...] = ()
    # At the last socket read, its TCP connections all went to GPU processes of its own job
    # (its parent, children or sibling ranks; KindFacts.job_connections) or to itself, one at
    # least to its job: a wait on its sockets is a wait for a peer of its job (comm), not for a
    # job server's next job (HostSignals.job_peers_only, daemon.analysis.phases).
    job_peers_only: bool = False
    # It is an interactive Python prompt (KindFacts.prompt: an interpreter with no script, or
    # -i, or an IPython shell, its stdin a terminal): a main thread with no Python frame reads
    # its user's next line in C (HostSignals.interactive_prompt, daemon.analysis.phases).
    interactive_prompt: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "kind_confidence": round(self.confidence, 2),
                "kind_evidence": list(self.evidence), "serves": self.serves,
                "listening_ports": list(self.listening_ports), "gpu_use": self.gpu_use,
                "kind_source": self.source, "connections_caught": self.connections_caught,
                "connections_over_s": self.connections_over_s,
                "peer_connections": self.peer_connections,
                "udp_ports": list(self.udp_ports),
                "udp_wildcard_ports": list(self.udp_wildcard_ports)}


def served_on(tcp: Sequence[int], udp: Sequence[int], unix: int) -> str:
    """Where a server serves, in words: "TCP ports 8000, 8001; UDP port 9999; 1 unix socket"
    (four ports of each at most), or "no port seen"."""
    said = [f"{name} port{'s' if len(ports) > 1 else ''} {', '.join(str(p) for p in ports[:4])}"
            for name, ports in (("TCP", tcp), ("UDP", udp)) if ports]
    if unix:
        said.append(f"{unix} unix socket{'s' if unix > 1 else ''}")
    return "; ".join(said) or "no port seen"


def held_on_all_addresses(ports: Sequence[int]) -> str:
    """Where a process may serve datagrams (Kind.udp_wildcard_ports), in words: "UDP port
    47151 on all addresses" (four ports at most)."""
    return (f"UDP port{'s' if len(ports) > 1 else ''} {', '.join(str(p) for p in ports[:4])} "
            "on all addresses")


def gpu_use_shape(active: Sequence[bool]) -> str | None:
    """steady, bursty or idle, from whether its kernels ran at each read (oldest first);
    None with fewer than SHAPE_MIN_READS reads."""
    if len(active) < SHAPE_MIN_READS:
        return None
    share = sum(active) / len(active)
    return STEADY if share >= STEADY_MIN else BURSTY if share > 0 else IDLE_USE


def frame_markers(threads: Iterable[ThreadStack]) -> set[str]:
    """The markers seen in the frames of every thread (not only the main one)."""
    found: set[str] = set()
    for thread in threads:
        for frame in thread.frames[:MAX_FRAMES_LOOKED_AT]:
            name, filename = frame.name or "", frame.filename or ""
            for marker, _, test in _FRAME_TESTS:
                if marker not in found and test(name, filename):
                    found.add(marker)
            for marker, fragments in RUNTIME_FRAMES:
                if marker not in found and any(f in filename for f in fragments):
                    found.add(marker)
    return found


def job_wait_marker(reason: str | None) -> str | None:
    """The marker (JOB_WAIT_FROM's keys) of a phase reason that says the process waits for its
    next job (starts with JOB_WAIT), else None. Only our words at the reason's head are read:
    up to its first parenthesis (after it come a quoted line of the process, a function's or a
    file's name), save the long poll's "(an HTTP request" that follows "on a socket"."""
    if not reason or not reason.startswith(JOB_WAIT):
        return None
    head = reason[len(JOB_WAIT):len(JOB_WAIT) + 80]
    first = head.split("(", 1)[0]
    if head.startswith(f"{first}(an HTTP request"):
        return JOB_WAIT_MARKER + "http"
    for needles, slug, _ in JOB_WAIT_SOURCES:
        if any(needle in first for needle in needles):
            return JOB_WAIT_MARKER + slug
    return JOB_WAIT_MARKER + JOB_WAIT_ELSE[0]


def job_wait_markers(phases: Mapping[str, Any]) -> set[str]:
    """The job_wait markers of a process's phase balance: those of its idle phase's top stacks
    that wait for its next job, where they hold at least JOB_WAIT_MIN_SHARE of the window (the
    test rules/idle.py's waits_for_jobs makes: the kind agrees with the consumer advice)."""
    return {marker for stack in waiting_stacks(phases, JOB_WAIT)
            if (marker := job_wait_marker(str(stack.get("reason") or ""))) is not None}


def peer_ports_only(facts: KindFacts, recent: Iterable[str]) -> bool:
    """Whether a process's TCP ports are a rank's peer ports: a connection to or from a GPU
    process of its own job on this host was seen (KindFacts.job_connected_seen_at; JobPeers:
    its parent, children, siblings running its command line), none it accepted came from
    another host, namespace or process, and nothing else says it serves (serving frames in a
    thread, a unix socket it listens on). Of a pair of ranks, which one listens and which
    connects is gloo's choice: either shows its peer."""
    return (facts.job_connected_seen_at is not None and not facts.served_others
            and not facts.unix_listening and not any(m in SERVE_FRAMES for m in recent))


# Serving frames that only a server shows: a rank accepts its peer once too ("accept").
SERVE_LOOP_FRAMES = tuple(m for m in SERVE_FRAMES if m != "accept")


def held_connection(facts: KindFacts, recent: Iterable[str]) -> bool:
    """Whether all a listening process ever accepted on its TCP ports is one connection, held
    open: the socket reads caught one distinct connection (KindFacts.connections_caught), it is
    open at the last read and was found at two or more reads, and no thread shows a serving
    loop (serve_forever, an engine loop). A rank's peer, or one client of a server."""
    return (facts.connections_caught == 1 and facts.accepted_connections == 1
            and facts.accepted_reads >= 2 and not any(m in SERVE_LOOP_FRAMES for m in recent))


def classify_kind(command: str, facts: KindFacts | None,
                  frames: Mapping[str, float] | None = None, *,
                  now: float | None = None, window_s: float = 1800.0,
                  gpu_use: str | None = None, kernels_at: float | None = None) -> Kind:
    """The kind of one process. `frames`: frame marker -> when last seen (markers older than
    `window_s` before `now` are not counted); `facts`: its sockets, libraries and parent;
    `gpu_use`: the shape of its GPU use (gpu_use_shape); `kernels_at`: when its own kernels
    last ran (counted like a frame marker, within `window_s`)."""
    scores: dict[str, float] = dict.fromkeys(KINDS[:-1], 0.0)
    evidence: list[str] = []

    def add(kind: str, weight: float, why: str) -> None:
        scores[kind] += weight
        evidence.append(why)

    recent = {m for m, ts in (frames or {}).items()
              if now is None or now - ts <= window_s}
    ports = facts.listening_ports if facts else ()
    accepted_seen = facts is not None and facts.accepted_seen_at is not None and (
        now is None or now - facts.accepted_seen_at <= window_s)
    if ports and ("collective" in recent or RANK_ARGUMENT.search(command or "")):
        # A rank of a distributed job listens for its peers (the c10d store, gloo): not a
        # service, and the connections it accepts are its peers'.
        evidence.append(f"listens on TCP port{'s' if len(ports) > 1 else ''} "
                        + ", ".join(str(p) for p in ports[:4])
                        + " for its peers (a rank of a distributed job): not a service")
        ports, accepted_seen = (), False
    elif ports and facts is not None and peer_ports_only(facts, recent):
        # ... and so does a rank whose stacks show no collective (the slow rank: the others
        # wait for it) and whose rank is no argument (mp.spawn passes it to a function): it is
        # connected to its own job's GPU processes, and nobody else connected to it.
        evidence.append(f"listens on TCP port{'s' if len(ports) > 1 else ''} "
                        + ", ".join(str(p) for p in ports[:4])
                        + " and is connected to its own job's GPU processes only (its parent, "
                        "children or sibling ranks): a rank's peer port, not a service")
        ports, accepted_seen = (), False
    unix = facts.unix_listening if facts else 0
    kernel = jupyter_kernel_command(command or "")
    if kernel and (ports or unix):
        # its frontend's ports: noted, not counted as serving (JUPYTER_KERNEL_COMMAND)
        evidence.append(
            "listens on " + (f"TCP port{'s' if len(ports) > 1 else ''} "
                             + ", ".join(str(p) for p in ports[:4]) if ports
                             else f"{unix} unix socket{'s' if unix > 1 else ''}")
            + (f" and its frontend is connected ({facts.accepted_connections} open at the "
               "last read)" if facts is not None and accepted_seen else "")
            + ": a Jupyter kernel's ports for its frontend (shell, control, heartbeat), "
            "not a service")
    elif ports:
        add(ONLINE_INFERENCE, LISTEN_WEIGHT,
            f"listens on TCP port{'s' if len(ports) > 1 else ''} "
            + ", ".join(str(p) for p in ports[:4]))
    if unix and not kernel:  # behind nginx or a sidecar: served on a unix socket, not a port
        add(ONLINE_INFERENCE, LISTEN_WEIGHT,
            f"listens on {unix} unix socket{'s' if unix > 1 else ''}")
    udp = facts.udp_ports if facts else ()
    if udp:  # no connection to catch: bound to a fixed port, unconnected, is serving
        add(ONLINE_INFERENCE, LISTEN_WEIGHT + ACCEPTED_WEIGHT,
            f"listens on UDP port{'s' if len(udp) > 1 else ''} "
            + ", ".join(str(p) for p in udp[:4]))
    listens = bool(ports) or bool(unix) or bool(udp)
    if kernel:
        accepted_seen = False  # its frontend's connections (noted above), no request's
    if facts is not None and accepted_seen:
        add(ONLINE_INFERENCE, ACCEPTED_WEIGHT,
            f"accepted connections on its port ({facts.accepted_connections} open at the last "
            f"read; seen in {facts.accepted_reads} reads)")
    # (a kernel's `accept` is its frontend's connection, as a rank's is its peer's: only a
    # serving loop run in it says it serves)
    serving_frames = sorted(m for m in recent
                            if m in (SERVE_LOOP_FRAMES if kernel else SERVE_FRAMES))
    for marker in sorted(recent):
        kind = FRAME_KIND.get(marker)
        if kind is None:
            continue
        if kind == ONLINE_INFERENCE:
            continue  # counted once below, and only where it listens
        if marker == "generate" and listens:
            kind = ONLINE_INFERENCE  # generating for requests that arrive on its port
        add(kind, FRAME_WEIGHT, f"{marker} frames in its stacks")
    # Its TCP connections all go to its own job's GPU processes: a socket wait is a wait for
    # its peer (phases._waits_for_peer, comm), and one read as a wait for its next job was
    # sampled before its kind knew that (its first seconds, before a sockets read).
    peers_only = (facts is not None and facts.job_connections > 0
                  and facts.outside_connections == 0)
    waits = sorted({JOB_WAIT_FROM[m] for m in recent if m in JOB_WAIT_FROM
                    and not (peers_only and m == SOCKET_JOB_WAIT)})
    if waits:
        add(BATCH_INFERENCE, JOB_WAIT_WEIGHT,
            f"waits for its next job from {' and '.join(waits)} in its sampled stacks: a job "
            "consumer, serving jobs as batch inference does")
    if serving_frames:
        add(ONLINE_INFERENCE, SERVE_FRAME_WEIGHT if listens else 1.0,
            f"serving frames in a thread ({', '.join(serving_frames)})")
    for library in facts.libraries if facts else ():
        kind = LIBRARY_KIND.get(library)
        if kind is not None:
            add(kind, LIBRARY_WEIGHT, f"maps {library}")
    ran_lately = kernels_at is not None and (now is None or now - kernels_at <= window_s)
    unknown = facts is not None and facts.sockets_unknown and not listens
    if unknown:
        # No port seen is not "no port": the table its port would be in was cut.
        evidence.append(SOCKETS_UNKNOWN_EVIDENCE)
    elif gpu_use in (STEADY, BURSTY) and not listens:
        # Steady, or bursty as a job starved of input is: kernels of its own and nobody to
        # serve.
        add(TRAINING, JOB_WEIGHT, f"{gpu_use} GPU use of its own and no port it serves: a job "
            "(training unless its runtime, frames, name or job waits say inference)")
    elif ran_lately and not listens:
        # The same fact over the markers' window: a loop that a loaded host slowed runs its
        # kernels further apart than the shape's reads reach, and is the same job.
        add(TRAINING, JOB_WEIGHT, f"kernels of its own in the last {window_s / 60:.0f} min and no "
            "port it serves: a job (training unless its runtime, frames, name or job waits say "
            "inference)")
    if gpu_use in (STEADY, BURSTY) and listens and accepted_seen:
        add(ONLINE_INFERENCE, REQUEST_DRIVEN_WEIGHT,
            f"{gpu_use} GPU use while it accepts connections (request-driven)")
    parent = facts.parent if facts else None
    if parent in PARENT_KIND:
        add(PARENT_KIND[parent], PARENT_WEIGHT, f"started by {parent}")
    prompt = PROMPT_EVIDENCE.get(facts.prompt or "") if facts else None
    if prompt is not None:
        add(NOTEBOOK, PROMPT_WEIGHT, prompt)
    for kind, weight, why in command_hints(command or ""):
        add(kind, weight, why)
    total = sum(scores.values())
    best = max(scores, key=lambda k: (scores[k], -TIE_ORDER.index(k)))
    # A notebook's ports are its own (a kernel's frontend, a prompt's): it serves only where a
    # serving loop runs in it (a server started from a cell) or it serves datagrams.
    serves = (listens and (accepted_seen or bool(serving_frames) or bool(udp))
              and (best != NOTEBOOK or bool(serving_frames) or bool(udp)))
    caught: dict[str, Any] = {"peer_connections": facts.other_connections if facts else 0,
                              "sockets_unknown": unknown, "udp_ports": udp,
                              "unix_listening": unix,
                              "udp_wildcard_ports": facts.udp_wildcard_ports if facts else (),
                              "job_peers_only": peers_only,
                              "interactive_prompt": facts is not None and facts.prompt in
                              PROMPT_EVIDENCE}
    if ports and facts is not None and facts.first_sockets_read_at is not None:
        caught.update(connections_caught=facts.connections_caught,
                      connections_over_s=max(facts.sockets_read_at
                                             - facts.first_sockets_read_at, 0.0),
                      one_held_connection=serves and held_connection(facts, recent))
    if total <= 0:
        return Kind(OTHER, 0.0, ("nothing observed points to a kind",
                                 *((SOCKETS_UNKNOWN_EVIDENCE,) if unknown else ())),
                    False, ports, scores, gpu_use, **caught)
    # The share of all weight, and a lone weak hint (weight 1) never above 0.5.
    confidence = scores[best] / (total + 1.0)
    if serves and best != ONLINE_INFERENCE:
        evidence.append("it listens and has served: treated as a server")
    if caught.get("one_held_connection"):
        evidence.append("all it accepted is one connection, held open across the socket "
                        "reads: a distributed job's peer rank, or one client of a server")
    return Kind(best, confidence, tuple(evidence), serves, ports, scores, gpu_use, **caught)


def kind_documents(kinds: Mapping[str, Kind]) -> dict[str, dict[str, Any]]:
    return {key: kind.as_dict() for key, kind in kinds.items()}


def recorded_kind(value: Any) -> dict[str, Any]:
    """A kind document as a store or snapshot holds it, read as data: the known fields only,
    each of its type, one line and bounded (a hostile file's text reaches a terminal)."""
    kind = value if isinstance(value, dict) else {}
    confidence = kind.get("kind_confidence")
    evidence = kind.get("kind_evidence")
    ports = kind.get("listening_ports")
    source = kind.get("kind_source")
    caught = kind.get("connections_caught")
    over = kind.get("connections_over_s")
    return {"kind": one_line(kind["kind"])[:32] if isinstance(kind.get("kind"), str) else None,
            "kind_confidence": float(confidence) if isinstance(confidence, int | float)
            and not isinstance(confidence, bool) else None,
            "kind_evidence": [one_line(e)[:200] for e in evidence[:16] if isinstance(e, str)]
            if isinstance(evidence, list) else [],
            "serves": kind.get("serves") is True,
            "listening_ports": [p for p in ports[:16] if isinstance(p, int)
                                and not isinstance(p, bool) and 0 < p < 65536]
            if isinstance(ports, list) else [],
            "kind_source": source if source in (OBSERVED, CONFIGURED) else None,
            "connections_caught": caught if isinstance(caught, int)
            and not isinstance(caught, bool) and caught >= 0 else 0,
            "connections_over_s": float(over) if isinstance(over, int | float)
            and not isinstance(over, bool) and over >= 0 else None,
            "peer_connections": peers if isinstance(peers := kind.get("peer_connections"), int)
            and not isinstance(peers, bool) and peers >= 0 else 0,
            "udp_ports": _ports(kind.get("udp_ports")),
            "udp_wildcard_ports": _ports(kind.get("udp_wildcard_ports"))}


def _ports(value: Any) -> list[int]:
    """A stored list of ports, read as data: ports only, at most 16."""
    return [p for p in value[:16] if isinstance(p, int) and not isinstance(p, bool)
            and 0 < p < 65536] if isinstance(value, list) else []


# Launchers whose children are jobs, whatever the launcher listens on (torchrun's rendezvous
# store accepts the other nodes' agents; a Jupyter server serves its browser, and its kernels
# are the user's, not the service's): their children are never a server's workers.
JOB_LAUNCHERS = frozenset({"jupyter", "torchrun", "deepspeed", "accelerate", "slurmstepd",
                           "mpirun"})


def parent_sockets_unknown(ppid: int, parent: KindFacts | None,
                           facts: KindFacts | None) -> bool:
    """Whether `ppid` may serve unseen (its sockets could not all be read, and none it listens
    on was seen) where serving_parent would read it: a worker of a server whose port a cut
    table hid must not read as a job's."""
    return (ppid > 1 and parent is not None and parent.sockets_unknown
            and not parent.listening_ports and not parent.udp_ports
            and not (facts is not None and facts.parent in JOB_LAUNCHERS))


def serving_parent(ppid: int, parent: KindFacts | None, facts: KindFacts | None) -> int:
    """`ppid` where that parent listens on a TCP port and has served a connection from outside
    its job (KindFacts.served_others), or serves on a UDP port (KindFacts.udp_ports), and no
    job launcher started the process; else 0."""
    if ppid <= 1 or parent is None or not (
            parent.listening_ports and parent.served_others or parent.udp_ports):
        return 0
    return 0 if facts is not None and facts.parent in JOB_LAUNCHERS else ppid
