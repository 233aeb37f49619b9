"""What a process shows of its kind without any change to its code: its TCP sockets, the
libraries mapped into it, its parent's command line, whether it is an interactive Python prompt.
Read as root, so bounded and safe:

- Sockets: the inodes of `/proc/PID/fd/*` (readlink only: "socket:[N]"; nothing is opened or
  followed), matched to `/proc/PID/net/tcp` and `tcp6` (the process's own network namespace).
  A socket in LISTEN is a port it serves; an ESTABLISHED one whose local port is one of its
  listening ports is a connection it accepted. UDP has no listen: a socket in
  `/proc/PID/net/udp` or `udp6` that is unconnected (no remote address) and bound to a port
  outside the host's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), or to any
  port on an address of its own (127.0.0.1, one of the host's), is a port it serves on
  (KindFacts.udp_ports). A client's unbound socket (statsd, DNS: a `sendto` from a training
  job) is given an ephemeral port on the wildcard address by the kernel and is no server; so
  is a connected one. A server bound to 0.0.0.0 or :: on a port inside the ephemeral range
  reads as such a client: no read of the tables tells them apart, so those sockets are kept
  apart (KindFacts.udp_wildcard_ports) for the rules, which look first where a process holding
  one waits on its sockets (rules/idle.py). The UDP tables are read
  once per network namespace per round, and only for a process some of whose sockets are in
  no TCP row (0.05 ms with no UDP socket on the host, 5.3 ms with 1,000, read and parsed on a
  shared 2-core machine; beside ~10-30 ms for the TCP tables there). For a process with TCP
  connections, the other end of each is the row of the same table with the addresses swapped:
  none (another host or namespace), its own socket, or one whose owner is looked for among the
  GPU processes of its job (JobPeers: parent, children, siblings running its command line),
  which tells a rank's peer port from a service (KindFacts.job_connected_seen_at,
  served_others), and a rank waiting on its peer's connection from a worker on a job server's
  (KindFacts.job_connections, outside_connections). Only a connection to a socket of this
  namespace is looked up: one to another host (a broker, a metrics service) has no row.
- Libraries: `/proc/PID/maps`, matched against a fixed list of library markers.
- Parent: the first bytes of `/proc/PPID/cmdline`, matched against a fixed list of launchers.
- Prompt: whether it is an interactive Python prompt (`read_prompt`): its own first bytes of
  `/proc/PID/cmdline` start an interpreter with no script, or with -i, or an IPython, ptpython
  or bpython shell, AND its stdin is a terminal (the text of the link `/proc/PID/fd/0`, read
  with readlink, never followed or opened). What a script prints or names its functions cannot
  make it one, and `python - < script.py` or `python train.py < data` have a script or a stdin
  that is no terminal.

Only marker names from our own vocabulary and numbers (ports, counts) leave this module: no text
of the process does, so nothing here needs redaction. Every read has a byte cap and an entry cap;
a truncated read says so. Reads are cached by (pid, start time) and refreshed at most every
`sockets_every_s` (sockets) and `maps_every_s` (libraries, parent): the tick never reads here,
discovery does, beside it. Processes found together (a job's ranks, a restart) would all come due
together again every period: a round re-reads only its share of the processes due (the longest
unread first), so the re-reads spread over the rounds instead of one round reading them all.

A process whose last socket read found no TCP socket (most training ranks between their
collectives' setup and exit; a CUDA process holds unix sockets only, which are in no TCP table)
and whose descriptor count is still the same (the kernel's count, one stat of /proc/PID/fd,
Linux 6.2+) has its due re-read answered from that count: to open a TCP socket or accept a
connection it must add a descriptor. A file closed as a socket opens, or a socket created
before and bound or connected after the listing, leaves the count the same, so its descriptors
are still listed every `maps_every_s`. (On an H200 host, 64 CUDA processes with 45 descriptors
each, among them sockets, were listed every 10 s: 27.7 ms a round, 2.8 ms a tick.)
"""

from __future__ import annotations

import math
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import NamedTuple, TypeVar

MAX_FDS = 4096  # fd entries looked at per process
MAX_NET_BYTES = 1 << 20  # of /proc/PID/net/tcp (+tcp6): ~6,800 sockets each
MAX_MAPS_BYTES = 4 << 20  # of /proc/PID/maps: a large PyTorch process maps ~1 MB of lines
MAX_CMDLINE_BYTES = 4096
MAX_PORTS = 16  # listening ports kept per process (TCP, and UDP apart)
# The host's ephemeral port range where /proc/sys/net/ipv4/ip_local_port_range cannot be read
# or makes no sense (Linux's default).
EPHEMERAL_DEFAULT = (32768, 60999)
SOCKETS_EVERY_S = 10.0
MAPS_EVERY_S = 60.0
# A round re-reads at most this many times its share of the processes (all of them once per
# period, over the time since the last round): a little more than the pace, so what a late round
# left over is caught up, never piled up.
REREAD_SLACK = 1.25

# In _read_sockets' truncated reads: a TCP table was cut and some of the process's sockets
# were not in the part read (they may be unix sockets: KindFactsReader._read looks there).
SOCKETS_UNMATCHED = "unmatched"

TCP_LISTEN = "0A"
TCP_ESTABLISHED = "01"

# Path fragments of mapped files -> the library marker they show. Checked on the lowercased path.
LIBRARY_MARKERS: tuple[tuple[str, str], ...] = (
    ("libtorch_cuda", "torch"), ("libtorch_cpu", "torch"), ("libtorch_python", "torch"),
    ("/vllm/", "vllm"), ("libnvinfer", "tensorrt"), ("/tensorrt", "tensorrt"),
    ("onnxruntime", "onnxruntime"), ("libtritonserver", "triton_server"),
    ("/triton/_c/", "triton"), ("xla_extension", "jax"), ("/jaxlib/", "jax"),
    ("libtpu", "jax"), ("text_generation_server", "tgi"), ("/sglang/", "sglang"),
    ("bitsandbytes", "bitsandbytes"), ("/zmq/", "zmq"), ("libzmq", "zmq"),
    ("libnccl", "nccl"),
    # quantized-weight kernels and FP8 kernels (read by the inference audit)
    ("awq_ext", "awq"), ("/awq/", "awq"), ("autoawq", "awq"), ("auto_gptq", "gptq"),
    ("autogptq", "gptq"), ("exllama", "gptq"), ("/gptqmodel/", "gptq"),
    ("transformer_engine", "fp8"),
    # kernels torch.compile (inductor) built and loaded, in its cache folder
    ("/torchinductor_", "torch_compile"),
)
_LIBRARY_MARKER_BYTES = tuple((fragment.encode(), marker) for fragment, marker in LIBRARY_MARKERS)
# Words in the parent's command line -> the launcher marker.
PARENT_MARKERS: tuple[tuple[str, str], ...] = (
    ("jupyter", "jupyter"), ("ipykernel", "jupyter"), ("torchrun", "torchrun"),
    ("torch.distributed.run", "torchrun"), ("torch.distributed.launch", "torchrun"),
    ("deepspeed", "deepspeed"), ("accelerate", "accelerate"), ("slurmstepd", "slurmstepd"),
    ("srun", "slurmstepd"), ("mpirun", "mpirun"), ("uvicorn", "uvicorn"),
    ("gunicorn", "gunicorn"), ("ray", "ray"),
)


# Why a process is an interactive Python prompt (KindFacts.prompt): our words, never its text.
PROMPT_BARE = "bare"  # an interpreter started with no script (`python`, `python3 -q`)
PROMPT_INSPECT = "inspect"  # `python -i` (after a script or -c, it stays at the prompt)
PROMPT_SHELL = "shell"  # IPython, ptpython or bpython (`ipython`, `python -m IPython`)
PROMPT_SHELLS = frozenset({"ipython", "ipython3", "ptpython", "ptipython", "bpython"})
PROMPT_MODULES = frozenset({"IPython", "ptpython", "bpython"})
_INTERPRETER = re.compile(r"(python|pypy)(\d+(\.\d+)*)?[dmu]?")
# CPython's options that take a value in the next argument when not glued to them (-W arg).
_VALUE_FLAGS = frozenset("WX")
_VALUE_OPTIONS = frozenset({"--check-hash-based-pycs"})
# What the link of a terminal reads: a pseudo-terminal (ssh, tmux, a terminal emulator, docker
# -it) or a console.
_TERMINAL = re.compile(r"/dev/(pts/\d+|tty[A-Za-z]*\d*|console)")


def prompt_of(argv: list[str]) -> str | None:
    """PROMPT_BARE, PROMPT_INSPECT or PROMPT_SHELL where `argv` starts an interactive Python
    prompt (given a terminal on its stdin), else None: a script, a module, `-c` or `-` (the
    program read from stdin) without -i."""
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if program in PROMPT_SHELLS:
        return _shell(argv[1:])
    if not _INTERPRETER.fullmatch(program):
        return None
    inspect = False
    args = iter(argv[1:])
    script = None
    for arg in args:
        if arg == "--":
            script = next(args, None)
            break
        if arg.startswith("--"):
            if arg in _VALUE_OPTIONS:
                next(args, None)
            continue
        if not arg.startswith("-") or arg == "-":
            script = arg
            break
        for at, flag in enumerate(arg[1:], start=1):
            rest = arg[at + 1:]
            if flag == "i":
                inspect = True
            elif flag in _VALUE_FLAGS:
                if not rest:
                    next(args, None)
                break
            elif flag == "c":
                return PROMPT_INSPECT if inspect else None
            elif flag == "m":
                if (rest or next(args, "")) in PROMPT_MODULES:
                    return _shell(list(args))
                return PROMPT_INSPECT if inspect else None
    if script is not None and os.path.basename(script) in PROMPT_SHELLS:
        return _shell(list(args))  # a shell's console script: `python3 /usr/bin/ipython`
    if inspect:
        return PROMPT_INSPECT
    return PROMPT_BARE if script is None else None


def _shell(args: list[str]) -> str | None:
    """A shell's arguments: a file to run makes it a script (`ipython run.py` runs it and
    exits), unless -i keeps it at the prompt after."""
    if any(not a.startswith("-") for a in args) and "-i" not in args:
        return None
    return PROMPT_SHELL


def stdin_is_terminal(pid: int) -> bool:
    """Whether pid's stdin is a terminal: the text of the link /proc/PID/fd/0 (readlink, never
    followed: the kernel's path of what it has open, at most PATH_MAX) names one."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/0")
    except OSError:
        return False
    return _TERMINAL.fullmatch(target) is not None


def read_prompt(pid: int) -> str | None:
    """Why pid is an interactive Python prompt (prompt_of, its stdin a terminal), else None.
    A command line longer than MAX_CMDLINE_BYTES is none: where its script is cannot be told.
    Raises OSError when it is gone."""
    data, cut = _read_capped(f"/proc/{pid}/cmdline", MAX_CMDLINE_BYTES)
    if cut or not data:
        return None
    why = prompt_of(data.rstrip(b"\0").decode("utf-8", "surrogateescape").split("\0"))
    return why if why is not None and stdin_is_terminal(pid) else None


@dataclass(frozen=True, slots=True)
class KindFacts:
    """One process's sockets, libraries and parent, as last read."""

    listening_ports: tuple[int, ...] = ()  # TCP ports it listens on (loopback included)
    accepted_connections: int = 0  # ESTABLISHED sockets on one of its listening ports
    other_connections: int = 0  # ESTABLISHED sockets it opened (clients, peers)
    libraries: tuple[str, ...] = ()  # LIBRARY_MARKERS found in its maps
    parent: str | None = None  # a PARENT_MARKERS launcher
    truncated: tuple[str, ...] = ()  # which reads hit their cap
    sockets_read_at: float = 0.0
    maps_read_at: float = 0.0
    # When a read last found an accepted connection (they come and go between reads: a server
    # that has served keeps this), and how many reads ever found one.
    accepted_seen_at: float | None = None
    accepted_reads: int = 0
    # Distinct accepted connections caught by the reads (by socket inode: a keep-alive
    # connection open at several reads counts once) since the first socket read: a lower bound
    # of the connections it accepted, as one that opens and closes between two reads is missed.
    connections_caught: int = 0
    first_sockets_read_at: float | None = None
    caught_inodes: frozenset[int] = frozenset()  # those open at the last read
    # Its descriptor count when the last listing of them found no TCP socket (a due re-read is
    # answered from the count while it is the same); None: it had TCP sockets, or the count is
    # not known (a kernel before 6.2, a count that moved while they were listed). And when its
    # descriptors were last listed.
    fds_without_tcp: int | None = None
    sockets_listed_at: float = 0.0
    # Why it is an interactive Python prompt (PROMPT_BARE/INSPECT/SHELL: read_prompt), read
    # with its maps; None: it is not one.
    prompt: str | None = None
    # Unix sockets it listens on (a server behind nginx or a sidecar), read with its maps;
    # the connections accepted on them count in accepted_connections' reads above.
    unix_listening: int = 0
    # Where the other ends of a listening process's TCP connections are (_AcceptedEnds,
    # JobPeers): when a read last found one (accepted or opened) held by a GPU process of its
    # own job (its parent, a child, a sibling running its command line: the peers of a local
    # process group), and when one it accepted from another host or namespace. One from itself
    # (rank 0 is a client of the store it hosts; a server may call itself) counts as neither. A
    # connection from a process of this host outside its job stays in `unsettled_accepted`
    # (its inode) until a read finds it held by its job (a rank its peers' first reads had not
    # seen yet holding a GPU); one closed before stays for good. A process that has served
    # anyone but its own job is a server (daemon.analysis.kinds).
    job_connected_seen_at: float | None = None
    foreign_accepted_at: float | None = None
    unsettled_accepted: frozenset[int] = frozenset()
    # Whether its last socket read could not tell if it listens: a TCP table of its network
    # namespace was longer than MAX_NET_BYTES (a busy host, or any local user who opens
    # thousands of sockets: the table is the namespace's) and some of its sockets were in
    # neither the part read nor the unix table. "No port" then means "not known": it is
    # never taken for a job with no port, nor offered SIGTERM (rules/idle.py), nor signalled
    # (api/actions.py).
    sockets_unknown: bool = False
    # UDP ports it serves on: unconnected sockets bound to a port outside the ephemeral range
    # (see the module doc). A datagram leaves no connection to catch: listening is all a read
    # sees of a UDP server.
    udp_ports: tuple[int, ...] = ()
    # Its unconnected UDP sockets on 0.0.0.0 or :: on a port inside the ephemeral range
    # (UdpSockets.wildcard): a client's (statsd, DNS) or a server's; no table tells which.
    udp_wildcard_ports: tuple[int, ...] = ()
    # Its ESTABLISHED TCP connections at the last socket read whose other end a GPU process of
    # its own job holds (JobPeers: its parent, a child, a sibling running its command line),
    # and those whose other end is neither that nor itself (another host or namespace, another
    # process of this host). A process all of whose connections go to its job (job_connections
    # > 0, outside_connections 0) waits on a socket for a peer of its job: a rank in a
    # hand-written all-reduce, not a worker on a job server (daemon.analysis.phases).
    job_connections: int = 0
    outside_connections: int = 0

    @property
    def served_others(self) -> bool:
        """Whether it ever accepted a TCP connection from outside its own job."""
        return self.foreign_accepted_at is not None or bool(self.unsettled_accepted)


# Connections from this host outside its job kept by inode (KindFacts.unsettled_accepted);
# past it, the process is taken as having served others for good.
MAX_UNSETTLED = 16


def judged_ends(facts: KindFacts, pid: int, ends: _AcceptedEnds, peers: JobPeers | None,
                now: float) -> KindFacts:
    """`facts` with where the other ends of its connections were at this read (KindFacts'
    job_connected_seen_at, foreign_accepted_at, unsettled_accepted, job_connections,
    outside_connections)."""
    if facts.foreign_accepted_at is not None:  # it served others for good: nothing to look up
        if facts.job_connections or facts.outside_connections != ends.established:
            facts = replace(facts, job_connections=0, outside_connections=ends.established)
        return facts if not ends.remote else replace(facts, foreign_accepted_at=now)
    job: set[int] = set()
    if (ends.local or ends.opened) and peers is not None:
        owned = peers.owned_by_job(pid, [*ends.local.values(), *ends.opened.values()])
        job = {mine for mine, end in (*ends.local.items(), *ends.opened.items())
               if end in owned}
    outside = max(ends.established - ends.to_self - len(job), 0)
    if (facts.job_connections, facts.outside_connections) != (len(job), outside):
        facts = replace(facts, job_connections=len(job), outside_connections=outside)
    unsettled = (set(facts.unsettled_accepted) | set(ends.local)) - job
    foreign_at = now if ends.remote else facts.foreign_accepted_at
    if len(unsettled) > MAX_UNSETTLED:
        unsettled, foreign_at = set(), now
    if not job and unsettled == facts.unsettled_accepted and foreign_at == \
            facts.foreign_accepted_at:
        return facts
    return replace(facts, job_connected_seen_at=now if job else facts.job_connected_seen_at,
                   foreign_accepted_at=foreign_at, unsettled_accepted=frozenset(unsettled))


_SOCKETS_READ_AT = attrgetter("sockets_read_at")
_MAPS_READ_AT = attrgetter("maps_read_at")


def _read_capped(path: str, cap: int) -> tuple[bytes, bool]:
    """Up to `cap` bytes of a /proc file (O_NOFOLLOW: a /proc path is never a user's link)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        chunks: list[bytes] = []
        total = 0
        while total < cap:
            chunk = os.read(fd, min(65536, cap - total))
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks), bool(os.read(fd, 1))
    finally:
        os.close(fd)


def fd_count(pid: int) -> int:
    """How many descriptors pid has open, as the kernel counts them (the size of /proc/PID/fd,
    Linux 6.2+; 0 before). Raises OSError when it is gone."""
    return os.stat(f"/proc/{pid}/fd").st_size


def socket_inodes(pid: int, cap: int = MAX_FDS) -> tuple[set[int], bool]:
    """Inodes of the sockets among the first `cap` descriptors of pid; True if capped."""
    inodes, capped, _ = _socket_inodes(pid, cap)
    return inodes, capped


def _socket_inodes(pid: int, cap: int = MAX_FDS) -> tuple[set[int], bool, int | None]:
    """As socket_inodes, with the descriptor count where the kernel's count was the same
    before and after they were listed (else None)."""
    before = fd_count(pid)
    inodes: set[int] = set()
    seen = 0
    with os.scandir(f"/proc/{pid}/fd") as entries:
        for entry in entries:
            seen += 1
            if seen > cap:
                return inodes, True, None
            try:
                target = os.readlink(entry.path)  # the link's text; never followed
            except OSError:
                continue
            if target.startswith("socket:[") and target.endswith("]"):
                try:
                    inodes.add(int(target[8:-1]))
                except ValueError:
                    continue
    # (a count of 0 is a kernel that does not count: never taken as "the same")
    steady = 0 < seen == before == fd_count(pid)
    return inodes, False, seen if steady else None


def parse_tcp_table(data: bytes) -> list[tuple[int, str, int]]:
    """(local port, state hex, inode) of each row of a /proc/net/tcp(6) table; bad rows skipped."""
    return [(port, state, inode) for port, state, inode, _, _ in parse_tcp_rows(data)]


# A row of a TCP table: (local port, state hex, inode, local address, remote address), the
# addresses as the kernel writes them ("0100007F:1F90"): compared, never parsed or shown.
TcpRow = tuple[int, str, int, bytes, bytes]


def parse_tcp_rows(data: bytes) -> list[TcpRow]:
    """Each row of a /proc/net/tcp(6) table (TcpRow); bad rows skipped."""
    rows = []
    for line in data.split(b"\n")[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        local, remote, state, inode = parts[1], parts[2], parts[3], parts[9]
        try:
            port = int(local.rsplit(b":", 1)[1], 16)
            rows.append((port, state.decode("ascii", "replace").upper(), int(inode), local,
                         remote))
        except (IndexError, ValueError):
            continue
    return rows


# One read of a network namespace's TCP tables per refresh round: netns id -> (rows, cut tables).
TcpTables = dict[str, tuple[list[TcpRow], list[str]]]
Table = TypeVar("Table")


def _once_per_netns(pid: int, tables: dict[str, Table] | None,
                    read: Callable[[], Table]) -> Table:
    """What `read` gives for pid's network namespace, read once per namespace per round
    (`tables`, the round's; the kernel formats a whole table on each read: ~1 ms on a busy
    host)."""
    try:
        netns: str | None = os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        netns = None
    if tables is None or netns is None:
        return read()
    found = tables.get(netns)
    if found is None:
        found = tables[netns] = read()
    return found


def _read_table(path: str) -> tuple[bytes, bool]:
    """A /proc/net table read up to MAX_NET_BYTES, and whether it was cut (its torn last line
    dropped)."""
    data, cut = _read_capped(path, MAX_NET_BYTES)
    if cut:
        data = data[:data.rfind(b"\n")]
    return data, cut


def _tcp_rows(pid: int, tables: TcpTables | None) -> tuple[list[TcpRow], list[str]]:
    """The TCP rows of pid's network namespace, read once per namespace per round."""
    return _once_per_netns(pid, tables, lambda: _read_tables(pid, ("tcp", "tcp6")))


def _read_tables(pid: int, names: tuple[str, ...]) -> tuple[list[TcpRow], list[str]]:
    """The rows of pid's /proc/PID/net tables `names` (TCP's layout, UDP's too), and those of
    them cut at MAX_NET_BYTES."""
    rows: list[TcpRow] = []
    cut_tables: list[str] = []
    for table in names:
        try:
            data, cut = _read_table(f"/proc/{pid}/net/{table}")
        except OSError:
            continue
        if cut:
            cut_tables.append(table)
        rows += parse_tcp_rows(data)
    return rows, cut_tables


# One read of a network namespace's UDP tables per refresh round: netns id -> (rows, cut tables,
# the ephemeral port range read with them).
UdpTables = dict[str, tuple[list[TcpRow], list[str], tuple[int, int]]]
UDP_CONNECTED = "01"  # a UDP socket given a peer by connect() (TCP_ESTABLISHED's code)


def parse_ephemeral_range(data: bytes) -> tuple[int, int]:
    """The (low, high) ports of an ip_local_port_range's text; EPHEMERAL_DEFAULT where it is
    not two ports in order."""
    parts = data.split()
    try:
        low, high = (int(p) for p in parts) if len(parts) == 2 else EPHEMERAL_DEFAULT
    except ValueError:
        return EPHEMERAL_DEFAULT
    return (low, high) if 0 < low <= high < 65536 else EPHEMERAL_DEFAULT


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The ports the kernel gives unbound sockets (this daemon's network namespace: a
    process's own is not readable from here; a container keeps Linux's default unless set)."""
    try:
        data, _ = _read_capped(path, 64)
    except OSError:
        return EPHEMERAL_DEFAULT
    return parse_ephemeral_range(data)


def _no_address(address: bytes) -> bool:
    """Whether a table's address ("00000000:0000", IPv6's 32 zeros) is none: all zeros, its
    port among them."""
    host, colon, port = address.rpartition(b":")
    return bool(colon) and bool(host) and not host.strip(b"0") and not port.strip(b"0")


def _wildcard(address: bytes) -> bool:
    """Whether a table's local address is the wildcard (0.0.0.0, ::), its port aside."""
    host, colon, _ = address.rpartition(b":")
    return bool(colon) and not host.strip(b"0")


class UdpSockets(NamedTuple):
    """A process's unconnected UDP sockets (no remote address), in one walk of its rows:
    - `listening`: those it serves on: bound to a port outside the ephemeral range on any
      address (0.0.0.0, ::, one of the host's), or to any port on an address of its own
      (127.0.0.1, one of the host's): the kernel gives a client's unbound socket an ephemeral
      port on the wildcard address, and only bind() names an address;
    - `wildcard`: the rest, on the wildcard address (0.0.0.0, ::) on a port inside the
      ephemeral range: a statsd or DNS client's socket, or a server's that bound such a port;
      no table tells them apart (its stacks may: rules/idle.py looks first where it waits on
      its sockets).
    Each sorted, at most MAX_PORTS."""

    listening: tuple[int, ...]
    wildcard: tuple[int, ...]


def udp_sockets(inodes: set[int] | frozenset[int], rows: list[TcpRow],
                ephemeral: tuple[int, int]) -> UdpSockets:
    """The unconnected UDP sockets among `inodes` (pid's sockets), split as UdpSockets says."""
    low, high = ephemeral
    listening: set[int] = set()
    wildcard: set[int] = set()
    for port, state, inode, local, remote in rows:
        if inode in inodes and 0 < port < 65536 and state != UDP_CONNECTED \
                and _no_address(remote):
            (wildcard if low <= port <= high and _wildcard(local) else listening).add(port)
    return UdpSockets(tuple(sorted(listening)[:MAX_PORTS]), tuple(sorted(wildcard)[:MAX_PORTS]))


def _udp_rows(pid: int, tables: UdpTables | None
              ) -> tuple[list[TcpRow], list[str], tuple[int, int]]:
    """The UDP rows of pid's network namespace (the same layout as TCP's), read once per
    namespace per round, with the ephemeral range."""
    def read() -> tuple[list[TcpRow], list[str], tuple[int, int]]:
        return (*_read_tables(pid, ("udp", "udp6")), ephemeral_range())

    return _once_per_netns(pid, tables, read)


UNIX_LISTENING_FLAG = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's Flags: a listening socket


def parse_unix_table(data: bytes) -> list[tuple[int, bool, bytes]]:
    """(inode, listening, path) of each row of a /proc/net/unix table; bad rows skipped. The
    path is the process's own text: compared here, never shown (b"" for an unnamed one)."""
    rows = []
    for line in data.split(b"\n")[1:]:
        parts = line.split(None, 7)
        if len(parts) < 7:
            continue
        try:
            rows.append((int(parts[6]), bool(int(parts[3], 16) & UNIX_LISTENING_FLAG),
                         parts[7] if len(parts) > 7 else b""))
        except ValueError:
            continue
    return rows


# One read of a network namespace's unix socket table per refresh round: netns id -> (rows,
# whether the read was cut).
UnixTables = dict[str, tuple[list[tuple[int, bool, bytes]], bool]]


def _unix_rows(pid: int, tables: UnixTables | None) -> tuple[list[tuple[int, bool, bytes]], bool]:
    """The unix socket rows of pid's network namespace, read once per namespace per round;
    True where the read hit its cap."""
    def read() -> tuple[list[tuple[int, bool, bytes]], bool]:
        data, cut = _read_table(f"/proc/{pid}/net/unix")
        return parse_unix_table(data), cut

    try:
        return _once_per_netns(pid, tables, read)
    except OSError:  # (not kept for the round: another process of its namespace may read it)
        return [], False


def unix_listening(inodes: set[int], rows: list[tuple[int, bool, bytes]]
                   ) -> tuple[int, frozenset[int]]:
    """(how many of `inodes` are listening unix sockets, the inodes of those accepted on
    them): an accepted unix connection carries its listener's path."""
    paths = {path for inode, listening, path in rows if listening and inode in inodes and path}
    listening = sum(1 for inode, is_listening, _ in rows if is_listening and inode in inodes)
    accepted = frozenset(inode for inode, is_listening, path in rows
                         if not is_listening and inode in inodes and path in paths)
    return listening, accepted


def read_sockets(pid: int, tables: TcpTables | None = None
                 ) -> tuple[tuple[int, ...], int, int, list[str]]:
    """(listening ports, accepted connections, other connections, truncated reads) of pid.
    `tables`: a cache of namespaces' TCP tables shared by the reads of one round."""
    ports, accepted, other, truncated = read_sockets_with_inodes(pid, tables)
    return ports, len(accepted), other, truncated


def read_sockets_with_inodes(pid: int, tables: TcpTables | None = None
                             ) -> tuple[tuple[int, ...], frozenset[int], int, list[str]]:
    """As read_sockets, with the inodes of the accepted connections instead of their count."""
    ports, accepted, other, truncated, _, _, _, _ = _read_sockets(pid, tables)
    return ports, accepted, other, truncated


def _read_sockets(pid: int, tables: TcpTables | None = None,
                  udp_tables: UdpTables | None = None
                  ) -> tuple[tuple[int, ...], frozenset[int], int, list[str], int | None,
                             _AcceptedEnds, tuple[int, ...], tuple[int, ...]]:
    """As read_sockets_with_inodes, with the descriptor count where it had no TCP socket
    (_socket_inodes; a socket in no TCP table is a UDP, unix or other one), where each accepted
    connection comes from (_AcceptedEnds), the UDP ports it serves on and those that may be
    a client's or a server's (udp_sockets; the UDP tables are read only where some of its
    sockets are in no TCP row)."""
    truncated: list[str] = []
    inodes, capped, steady_fds = _socket_inodes(pid)
    if capped:
        truncated.append("fd")
    if not inodes:
        return (), frozenset(), 0, truncated, steady_fds, _NO_ENDS, (), ()
    all_rows, cut_tables = _tcp_rows(pid, tables)
    truncated += cut_tables
    rows = [r for r in all_rows if r[2] in inodes]
    udp: tuple[int, ...] = ()
    wildcard: tuple[int, ...] = ()
    if len(rows) < len(inodes):
        left = inodes - {r[2] for r in rows}
        udp_rows, cut_udp, ephemeral = _udp_rows(pid, udp_tables)
        truncated += cut_udp
        udp, wildcard = udp_sockets(left, udp_rows, ephemeral)
        # (some may be its TCP or UDP sockets past a cut: see the caller)
        if cut_tables or cut_udp and not left <= {r[2] for r in udp_rows}:
            truncated.append(SOCKETS_UNMATCHED)
    if not rows:
        return ((), frozenset(), 0, truncated, None if cut_tables else steady_fds, _NO_ENDS,
                udp, wildcard)
    listening = sorted({row[0] for row in rows if row[1] == TCP_LISTEN})
    ports = set(listening)
    established = [row for row in rows if row[1] == TCP_ESTABLISHED]
    accepted = frozenset(row[2] for row in established if row[0] in ports)
    return (tuple(listening[:MAX_PORTS]), accepted, len(established) - len(accepted),
            truncated, None, _connection_ends(established, ports, all_rows, inodes), udp,
            wildcard)


class _AcceptedEnds(NamedTuple):
    """Where the other ends of a process's connections are at one read. Those it accepted (a
    listening process's): its own socket (it connected to itself), another socket of this
    host's network namespace (whose owner is looked for), or elsewhere (another host or
    namespace: no row of the table is the other end). Those it opened, to another socket of
    this namespace. And how many it has, and how many of them end at a socket of its own."""

    own: frozenset[int] = frozenset()  # accepted inodes whose other end is pid's
    local: Mapping[int, int] = {}  # accepted inode -> the other end's inode (not pid's)
    remote: frozenset[int] = frozenset()  # accepted inodes from elsewhere
    opened: Mapping[int, int] = {}  # opened inode -> the other end's inode (not pid's)
    established: int = 0  # its ESTABLISHED connections, accepted or opened
    to_self: int = 0  # of those, the ones whose other end is a socket of its own


_NO_ENDS = _AcceptedEnds()


def _connection_ends(established: list[TcpRow], ports: set[int], all_rows: list[TcpRow],
                     own: set[int]) -> _AcceptedEnds:
    """Where the other end of each connection of a process is (_AcceptedEnds): the row of the
    same table with its local and remote addresses swapped. Looked for only where a process
    has connections (a server, a rank, a client): one pass over the table."""
    if not established:
        return _NO_ENDS
    wanted = {(row[4], row[3]): row[2] for row in established}  # (other's local, its remote)
    ends = {}
    for row in all_rows:
        mine = wanted.get((row[3], row[4]))
        if mine is not None and row[1] == TCP_ESTABLISHED:
            ends[mine] = row[2]
    accepted = {row[2] for row in established if row[0] in ports}
    return _AcceptedEnds(
        frozenset(i for i, end in ends.items() if end in own and i in accepted),
        {i: end for i, end in ends.items() if end not in own and i in accepted},
        frozenset(i for i in accepted if i not in ends),
        {i: end for i, end in ends.items() if end not in own and i not in accepted},
        len(established), sum(1 for end in ends.values() if end in own))


# Peers of a local process group: the processes of one job on this host are a process and
# its parent, its children, and its siblings that run the same command line but for its
# numbers (ranks started by one launcher: mp.spawn's children differ in the descriptors their
# command lines name, torchrun's and a fork's are the same). Only those holding a GPU (the
# processes the reader is given) count, so a client on the same host (a benchmark, a proxy, a
# test, a trainer calling a model server) started beside a server by the same shell is never
# one of its job's peers. A socket is looked for in at most this many of them per process read.
MAX_PEER_LOOKUPS = 16
# The start time a parent is read under, beside its GPU child, for its sockets alone
# (Kind.serving_parent): never a GPU process's own key, whose start time is never below 0, and
# never one of a job's peers (JobPeers counts the GPU processes alone).
PARENT_START = -1.0
_NUMBERS = re.compile(rb"\d+")


class JobPeers:
    """Finds, for one refresh round, whether a socket belongs to a GPU process of a given
    process's job (JOB_PEERS). Each process's parent and socket inodes are read at most once
    a round, and only when a process has accepted a connection from this host."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.pids = sorted(set(pids))
        self._ppids: dict[int, int | None] = {}
        self._inodes: dict[int, set[int]] = {}
        self._commands: dict[int, bytes | None] = {}

    def ppid(self, pid: int) -> int | None:
        if pid not in self._ppids:
            try:
                data, _ = _read_capped(f"/proc/{pid}/stat", 4096)
                self._ppids[pid] = int(data[data.rindex(b")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                self._ppids[pid] = None
        return self._ppids[pid]

    def command(self, pid: int) -> bytes | None:
        """pid's command line with its numbers blanked, to compare only (never shown); None
        where it is longer than MAX_CMDLINE_BYTES or unreadable (never the same as another)."""
        if pid not in self._commands:
            try:
                data, cut = _read_capped(f"/proc/{pid}/cmdline", MAX_CMDLINE_BYTES)
                self._commands[pid] = None if cut or not data else _NUMBERS.sub(b"#", data)
            except OSError:
                self._commands[pid] = None
        return self._commands[pid]

    def _sockets_of(self, pid: int) -> set[int]:
        if pid not in self._inodes:
            try:
                self._inodes[pid], _ = socket_inodes(pid)
            except OSError:
                self._inodes[pid] = set()
        return self._inodes[pid]

    def job_of(self, pid: int) -> list[int]:
        """The GPU processes of pid's job on this host (MAX_PEER_LOOKUPS): its parent,
        children, and siblings running its command line."""
        parent = self.ppid(pid)
        found = []
        for other in self.pids:
            if other == pid:
                continue
            up = self.ppid(other)
            if other == parent or up == pid or (
                    up is not None and up == parent and up > 1
                    and (mine := self.command(pid)) is not None and mine == self.command(other)):
                found.append(other)
                if len(found) >= MAX_PEER_LOOKUPS:
                    break
        return found

    def owned_by_job(self, pid: int, inodes: Iterable[int]) -> set[int]:
        """Those of `inodes` (sockets on this host) held by a GPU process of pid's job."""
        wanted = set(inodes)
        if not wanted:
            return set()
        found: set[int] = set()
        for other in self.job_of(pid):
            found |= wanted & self._sockets_of(other)
            if found == wanted:
                break
        return found


def _unmatched_not_unix(pid: int, tcp: TcpTables | None, unix: UnixTables | None,
                        udp: UdpTables | None = None) -> bool:
    """Whether some of pid's sockets are in neither its namespace's TCP or UDP rows as read
    (cut) nor its unix table: they may be TCP or UDP sockets past the cut, a port it listens on
    among them. Read only where a TCP or UDP table was cut (a busy or a flooded host)."""
    inodes, _, _ = _socket_inodes(pid)
    tcp_rows, _ = _tcp_rows(pid, tcp)
    udp_rows, _, _ = _udp_rows(pid, udp)
    unix_rows, _ = _unix_rows(pid, unix)
    left = (inodes - {row[2] for row in tcp_rows} - {row[2] for row in udp_rows}
            - {row[0] for row in unix_rows})
    return bool(left)


def read_unix_listening(pid: int, tables: UnixTables | None = None
                        ) -> tuple[int, frozenset[int], bool]:
    """(listening unix sockets of pid, the unix connections accepted on them, whether the
    table's read was cut): a server behind a proxy on a unix socket serves as one on a port
    does. Raises OSError when it is gone."""
    inodes, _, _ = _socket_inodes(pid)
    if not inodes:
        return 0, frozenset(), False
    rows, cut = _unix_rows(pid, tables)
    listening, accepted = unix_listening(inodes, rows)
    return listening, accepted, cut


def libraries_in_maps(data: bytes) -> tuple[str, ...]:
    """The LIBRARY_MARKERS found in the text of /proc/PID/maps: each fragment looked for once
    in its distinct paths, lowercased and joined by newlines (no fragment spans one). Looking
    in each path for each fragment cost 0.58 ms per CUDA process on an H200 host."""
    paths = {line[slash:] for line in data.split(b"\n") if (slash := line.find(b"/")) >= 0}
    low = b"\n".join(paths).lower()
    return tuple(sorted({marker for fragment, marker in _LIBRARY_MARKER_BYTES
                         if fragment in low}))


def parent_marker(cmdline: bytes) -> str | None:
    low = cmdline.replace(b"\0", b" ").lower().decode("utf-8", "replace")
    return next((marker for word, marker in PARENT_MARKERS if word in low), None)


def _parent_of(pid: int, parents: dict[int, str | None] | None = None) -> str | None:
    """The launcher marker of pid's parent. `parents`: the markers of the parents read this
    round, by pid (processes started by one launcher share it: its command line read once)."""
    data, _ = _read_capped(f"/proc/{pid}/stat", 4096)
    ppid = int(data[data.rindex(b")") + 2:].split()[1])
    if ppid <= 1:
        return None
    if parents is not None and ppid in parents:
        return parents[ppid]
    cmdline, _ = _read_capped(f"/proc/{ppid}/cmdline", MAX_CMDLINE_BYTES)
    marker = parent_marker(cmdline)
    if parents is not None:
        parents[ppid] = marker
    return marker


@dataclass
class KindFactsReader:
    """Reads KindFacts for the processes it is given, each at most every few seconds; keyed
    by (pid, start time). `refresh` runs beside the tick (discovery's thread); `get` anywhere."""

    sockets_every_s: float = SOCKETS_EVERY_S
    maps_every_s: float = MAPS_EVERY_S
    _facts: dict[tuple[int, float], KindFacts] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    reads: int = 0  # how many socket or maps reads were done (the cache's measure)
    # how many due socket re-reads were answered by an unchanged descriptor count instead
    fd_checks: int = 0
    _refreshed_at: float | None = None  # when the last round ran
    # when a re-read of a process last failed (its last reading kept): by (pid, start time)
    _failed_at: dict[tuple[int, float], float] = field(default_factory=dict)

    def refresh(self, keys: Iterable[tuple[int, float]], now: float) -> None:
        """Read what is due for each process (a new one: all of it, now); forget processes not
        given."""
        wanted = set(keys)
        since = None if self._refreshed_at is None else now - self._refreshed_at
        self._refreshed_at = now
        sockets_due = self._due(wanted, _SOCKETS_READ_AT, self.sockets_every_s, now, since)
        maps_due = self._due(wanted, _MAPS_READ_AT, self.maps_every_s, now, since)
        fresh: dict[tuple[int, float], KindFacts] = {}
        tables: TcpTables = {}  # this round's TCP tables, one read per network namespace
        unix_tables: UnixTables = {}  # and its unix socket tables
        udp_tables: UdpTables = {}  # and its UDP tables (where a process has non-TCP sockets)
        parents: dict[int, str | None] = {}  # this round's parents' markers, by pid
        # whose sockets are its job's, this round: the GPU processes given, not the parents
        # read beside them for their sockets (PARENT_START), as JobPeers says
        peers = JobPeers(pid for pid, start in wanted if start != PARENT_START)
        failed = self._failed_at
        for key in wanted:
            old = self._facts.get(key)
            sockets, maps = key in sockets_due, key in maps_due
            if old is not None and not sockets and not maps:
                fresh[key] = old  # nothing due (most rounds): the same reading, not a copy
                continue
            try:
                if sockets and not maps and old is not None and self._no_new_sockets(
                        key[0], old, now):
                    fresh[key] = replace(old, sockets_read_at=now)  # (what it read holds)
                    continue
                fresh[key] = self._read(key[0], old, now, tables, parents,
                                        sockets=sockets or old is None,
                                        maps=maps or old is None, unix_tables=unix_tables,
                                        peers=peers, udp_tables=udp_tables)
            except (OSError, ValueError, IndexError):
                if old is not None:
                    fresh[key] = old  # gone or refused this time: keep the last reading ...
                    failed[key] = now  # ... and try again a period later, not first in line
        self._failed_at = {key: at for key, at in failed.items() if key in fresh}
        with self._lock:
            self._facts = fresh

    def _due(self, keys: set[tuple[int, float]], read_at: Callable[[KindFacts], float],
             every_s: float, now: float, since: float | None) -> set[tuple[int, float]]:
        """The processes read before whose re-read (`read_at`: when it was last made) is due
        this round: those last read `every_s` ago or more, the longest unread first, at most
        REREAD_SLACK times their share of the processes over the `since` seconds since the last
        round. Processes read together the first time spread over the next rounds."""
        facts, failed = self._facts, self._failed_at
        due = [(at, key) for key in keys
               if (old := facts.get(key)) is not None and now - (at := read_at(old)) >= every_s]
        if failed:  # (rare: a re-read that failed is tried again a period after it failed)
            due = [(at, key) for at, key in due if now - failed.get(key, at) >= every_s]
        if since is None or every_s <= 0:
            return {key for _, key in due}
        share = math.ceil(len(keys) * min(since, every_s) / every_s * REREAD_SLACK)
        if len(due) > share:
            due.sort()
            del due[share:]
        return {key for _, key in due}

    def _no_new_sockets(self, pid: int, old: KindFacts, now: float) -> bool:
        """Whether pid's due socket re-read may be skipped: its last listing found no TCP socket,
        it has as many descriptors as then, and that listing is not `maps_every_s` old (see
        the module doc). Raises OSError when it is gone."""
        if old.fds_without_tcp is None or now - old.sockets_listed_at >= self.maps_every_s:
            return False
        if fd_count(pid) != old.fds_without_tcp:
            return False
        self.fd_checks += 1
        return True

    def _read(self, pid: int, old: KindFacts | None, now: float, tables: TcpTables,
              parents: dict[int, str | None] | None = None, *, sockets: bool = True,
              maps: bool = True, unix_tables: UnixTables | None = None,
              peers: JobPeers | None = None, udp_tables: UdpTables | None = None
              ) -> KindFacts:
        """Read pid's sockets and/or its libraries and parent (`sockets`, `maps`) into a new
        reading; what is not read is kept from `old`. `peers`: the round's JobPeers (None: a
        connection from another process is never taken as from its job)."""
        facts = old or KindFacts()
        truncated = set(facts.truncated)
        if sockets:
            if udp_tables is None:
                udp_tables = {}
            ports, inodes, other, cut, fds_without_tcp, ends, udp, wildcard = _read_sockets(
                pid, tables, udp_tables)
            accepted = len(inodes)
            self.reads += 1
            # (more descriptors than MAX_FDS, no port among those listed: the same unknown)
            unknown = (("fd" in cut and not ports and not udp) or SOCKETS_UNMATCHED in cut
                       and not udp and _unmatched_not_unix(pid, tables, unix_tables,
                                                           udp_tables))
            cut = [c for c in cut if c != SOCKETS_UNMATCHED]
            truncated = (truncated - {"fd", "tcp", "tcp6", "udp", "udp6"}) | set(cut)
            facts = KindFacts(ports, accepted, other, facts.libraries, facts.parent,
                              facts.truncated, now, facts.maps_read_at,
                              now if accepted else facts.accepted_seen_at,
                              facts.accepted_reads + (1 if accepted else 0),
                              facts.connections_caught + len(inodes - facts.caught_inodes),
                              facts.first_sockets_read_at if facts.first_sockets_read_at
                              is not None else now, inodes, fds_without_tcp, now,
                              facts.prompt, facts.unix_listening,
                              facts.job_connected_seen_at, facts.foreign_accepted_at,
                              facts.unsettled_accepted, unknown, udp, wildcard)
            facts = judged_ends(facts, pid, ends, peers, now)
        if maps:
            data, cut_maps = _read_capped(f"/proc/{pid}/maps", MAX_MAPS_BYTES)
            self.reads += 1
            truncated.discard("maps")
            if cut_maps:
                truncated.add("maps")
            facts = KindFacts(facts.listening_ports, facts.accepted_connections,
                              facts.other_connections, libraries_in_maps(data),
                              _parent_of(pid, parents), facts.truncated,
                              facts.sockets_read_at, now, facts.accepted_seen_at,
                              facts.accepted_reads,
                              facts.connections_caught, facts.first_sockets_read_at,
                              facts.caught_inodes, facts.fds_without_tcp,
                              facts.sockets_listed_at, read_prompt(pid),
                              facts.unix_listening, facts.job_connected_seen_at,
                              facts.foreign_accepted_at, facts.unsettled_accepted,
                              facts.sockets_unknown, facts.udp_ports,
                              facts.udp_wildcard_ports,
                              facts.job_connections, facts.outside_connections)
            listening, accepted_unix, cut_unix = read_unix_listening(pid, unix_tables)
            truncated.discard("unix")
            if cut_unix:
                truncated.add("unix")
            facts = replace(
                facts, unix_listening=listening,
                accepted_seen_at=now if accepted_unix else facts.accepted_seen_at,
                accepted_reads=facts.accepted_reads + (1 if accepted_unix else 0),
                connections_caught=facts.connections_caught
                + len(accepted_unix - facts.caught_inodes))
        return replace(facts, truncated=tuple(sorted(truncated)))

    def get(self, key: tuple[int, float]) -> KindFacts | None:
        with self._lock:
            return self._facts.get(key)


def read_kind_facts(pid: int, now: float) -> KindFacts:
    """One process's sockets, libraries and parent, read now (no cache): for a check made
    once, such as the one before an action signals a process. Raises OSError when it is gone."""
    return KindFactsReader()._read(pid, None, now, {})
