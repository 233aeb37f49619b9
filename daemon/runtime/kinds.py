"""Workload kinds, kept up to date beside the tick: the facts each GPU process shows
(daemon.sources.kindfacts, read at most every few seconds per process) and the frame markers the
stack sampler saw in any of its threads (runtime/attribution.py) with the job waits of its
phase balance in the last rules round (runtime/daemon.py: a job consumer), classified by
daemon.analysis.kinds. `refresh` runs in discovery's thread; `kinds` is swapped whole, so
readers on the event loop see one round or the next, never half of one.

A job whose kind the config sets ([kinds.jobs]: job label -> kind) gets that kind instead of the
classified one, with the evidence "set in config" and what the classifier would have said.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from operator import attrgetter
from typing import Any, NamedTuple

from daemon.analysis.inference_audit import InferenceAudit, audit_inference
from daemon.analysis.kinds import (
    CONFIGURED,
    INFERENCE_KINDS,
    NOTEBOOK,
    PARENT_SOCKETS_UNKNOWN,
    Kind,
    classify_kind,
    gpu_use_shape,
    parent_sockets_unknown,
    serving_parent,
)
from daemon.analysis.ledger import JobLabeler
from daemon.analysis.window_ticks import WINDOW_S as MARKER_WINDOW_S  # markers this recent count
from daemon.sources.kindfacts import PARENT_START, KindFacts, KindFactsReader
from daemon.wire import process_key

# A kind is classified again only when its facts or markers change, or after this long (the
# evidence ages out of the 30-minute window; a minute late is soon enough).
RECLASSIFY_EVERY_S = 60.0
# Reads of whether its kernels ran, kept per process for the shape of its GPU use: at one read
# per discovery round (2 s), the last minute.
GPU_USE_READS = 30
# SM share readings kept per process for the inference audit: one a discovery round (~2 s),
# so about the last 5 minutes.
SM_READINGS = 150


# KindFacts' fields that say when or how a read was made, not what it found
_READ_TIMES = ("sockets_read_at", "maps_read_at", "fds_without_tcp", "sockets_listed_at")
_FOUND = tuple(f.name for f in fields(KindFacts) if f.name not in _READ_TIMES)
_found = attrgetter(*_FOUND)  # one C call per process per round, not a getattr per field


def facts_signature(facts: KindFacts | None) -> tuple[object, ...] | None:
    """What of `facts` the classifier reads: all but when each read was made (a re-read that
    found the same sockets and libraries changes nothing), save the span over which a listening
    process's connections were caught (its evidence says it)."""
    if facts is None:
        return None
    return (*_found(facts), facts.sockets_read_at if facts.listening_ports else None)


def configured_kind(kind: str, label: str, observed: Kind) -> Kind:
    """The kind [kinds.jobs] sets for job `label`, keeping what was observed as evidence (a
    server stays a server: `serves` is what the process did, not what it is called)."""
    said = (f"classified {observed.kind} ({observed.confidence:.0%} sure)"
            if observed.confidence > 0 else "nothing observed points to a kind")
    return Kind(kind, 1.0, (f"set in config: [kinds.jobs] job {label[:60]!r} = {kind!r}",
                            said), observed.serves, observed.listening_ports, observed.scores,
                gpu_use=observed.gpu_use, source=CONFIGURED,
                connections_caught=observed.connections_caught,
                connections_over_s=observed.connections_over_s,
                peer_connections=observed.peer_connections,
                serving_parent=observed.serving_parent,
                one_held_connection=observed.one_held_connection,
                sockets_unknown=observed.sockets_unknown, udp_ports=observed.udp_ports,
                unix_listening=observed.unix_listening,
                udp_wildcard_ports=observed.udp_wildcard_ports,
                job_peers_only=observed.job_peers_only,
                interactive_prompt=observed.interactive_prompt)


class _Classified(NamedTuple):
    """One process's kind as the last round left it, with what it was classified from."""

    signature: tuple[object, ...]  # what the classifier read: the same again, the same kind
    kind: Kind
    facts: KindFacts | None  # the reading signed, and its signature (facts_signature)
    facts_signature: tuple[object, ...] | None
    text_key: str  # daemon.wire.process_key


_NO_MARKERS: frozenset[tuple[str, float]] = frozenset()


def with_serving_parent(kind: Kind, ppid: int) -> Kind:
    """`kind` as the worker of its parent's server (Kind.serving_parent); a notebook stays a
    notebook (a kernel is its user's)."""
    if not ppid or kind.kind == NOTEBOOK:
        return kind
    return replace(kind, serving_parent=ppid, evidence=(
        *kind.evidence, f"its parent (pid {ppid}) listens on a TCP port and has served: this "
        "process works for that server"))


class _Process:
    """One GPU process as the kinds rounds keep it (one object, updated in place each round)."""

    __slots__ = ("sm", "gpu_use", "kernels_at", "classified")

    def __init__(self) -> None:
        self.sm: deque[float] = deque(maxlen=SM_READINGS)  # its SM share, a reading a round
        self.gpu_use: deque[bool] = deque(maxlen=GPU_USE_READS)  # its kernels ran, a round
        # when its kernels last ran (a read that said so): kind evidence over the markers'
        # window, beyond the shape's last GPU_USE_READS reads
        self.kernels_at: float | None = None
        self.classified: _Classified | None = None  # its kind as the last round left it


class KindTracker:
    def __init__(self, reader: KindFactsReader | None = None, *,
                 job_kinds: Mapping[str, str] | None = None,
                 jobs: Mapping[str, str] | None = None) -> None:
        """`job_kinds`: [kinds.jobs], job label -> kind; `jobs`: [cost.jobs], the patterns
        that name job labels (daemon.analysis.ledger.JobLabeler, the ledger's labels)."""
        self.reader = reader if reader is not None else KindFactsReader()
        self.kinds: dict[str, Kind] = {}  # by 'pid:start_time'
        self.job_kinds = dict(job_kinds or {})
        self.labeler = JobLabeler(jobs)
        self._processes: dict[tuple[int, float], _Process] = {}
        # the inference audit of each inference process (daemon.analysis.inference_audit)
        self.audits: dict[str, InferenceAudit] = {}
        self._documents: dict[str, dict[str, Any]] = {}  # documents(), this round's
        self._documents_of: dict[str, tuple[Kind, dict[str, Any]]] = {}  # ... and their kinds

    def refresh(self, processes: Iterable[tuple[int, float, str, Mapping[str, str]]],
                markers: Mapping[tuple[int, float], Mapping[str, float]], now: float,
                sm_shares: Mapping[tuple[int, float], float] | None = None,
                kernels_ran: Mapping[tuple[int, float], bool] | None = None,
                parents: Mapping[tuple[int, float], int] | None = None) -> None:
        """(pid, start_time, command, owner) of each GPU process, the frame markers seen in
        its stacks (a copy taken on the loop), its SM share now (percent, over its GPUs) and
        whether its kernels ran since the last round (any tick; without it: its SM share now
        above 0): read what is due, classify all, audit the inference ones. `parents`: the
        parent pid of each (its sockets are read too: a parent that serves makes the process
        its worker, Kind.serving_parent); the daemon, parent of its simulated workloads, never
        counts."""
        procs = list(processes)
        shares_now = sm_shares or {}
        ran_now = kernels_ran or {}
        me = os.getpid()
        ppids = {key: ppid for key, ppid in (parents or {}).items() if ppid > 1 and ppid != me}
        self.reader.refresh([*((pid, start) for pid, start, _, _ in procs),
                             *{(ppid, PARENT_START) for ppid in ppids.values()}], now)
        reading = self.reader.get
        round_of = now // RECLASSIFY_EVERY_S
        before = self._processes
        kept: dict[tuple[int, float], _Process] = {}
        changed = len(procs) != len(before)  # a process came or went, or a kind changed
        for pid, start, command, owner in procs:
            key = (pid, start)
            state = before.get(key)
            if state is None:
                state = _Process()
                changed = True
            kept[key] = state
            share = shares_now.get(key)
            if share is not None:
                state.sm.append(share)
            ran = ran_now.get(key)
            used = state.gpu_use
            if ran is not None or share is not None:
                used.append(bool(ran) if ran is not None else bool(share))
            if used and used[-1]:
                state.kernels_at = now
            facts = reading(key)
            last = state.classified
            # A reading the reader handed back unchanged (most rounds) keeps its signature.
            signed = (last.facts_signature if last is not None and last.facts is facts
                      else facts_signature(facts))
            seen = markers.get(key)
            shape = gpu_use_shape(used)
            ppid = ppids.get(key, 0)
            parent = reading((ppid, PARENT_START)) if ppid else None
            serving = serving_parent(ppid, parent, facts)
            parent_unknown = not serving and parent_sockets_unknown(ppid, parent, facts)
            signature = (signed, frozenset(seen.items()) if seen else _NO_MARKERS, command,
                         shape, state.kernels_at is None, round_of, serving, parent_unknown)
            if last is not None and last.signature == signature:
                if last.facts is not facts:  # a re-read that found the same
                    state.classified = last._replace(facts=facts, facts_signature=signed)
                continue
            kind = classify_kind(command, facts, dict(seen or {}), now=now,
                                 window_s=MARKER_WINDOW_S, gpu_use=shape,
                                 kernels_at=state.kernels_at)
            if self.job_kinds:
                label = self.labeler.label(command, owner)
                if label in self.job_kinds:
                    kind = configured_kind(self.job_kinds[label], label, kind)
            kind = with_serving_parent(kind, serving)
            if parent_unknown and not kind.sockets_unknown and kind.kind != NOTEBOOK:
                kind = replace(kind, sockets_unknown=True, evidence=(
                    *kind.evidence, f"its parent (pid {ppid}) may serve, this process its "
                    f"worker: {PARENT_SOCKETS_UNKNOWN}"))
            if last is not None and kind == last.kind:
                kind = last.kind  # classified again (a minute passed), the same: kept as it was
            else:
                changed = True
            state.classified = _Classified(signature, kind, facts, signed,
                                           last.text_key if last is not None
                                           else process_key(*key))
        self._processes = kept
        if changed:
            self.kinds = {c.text_key: c.kind for state in kept.values()
                          if (c := state.classified) is not None}
        audits = {}
        for key, state in kept.items():
            classified = state.classified
            if classified is None or classified.kind.kind not in INFERENCE_KINDS:
                continue  # (audit_inference's answer for every other kind: no audit)
            recent = [m for m, ts in (markers.get(key) or {}).items()
                      if now - ts <= MARKER_WINDOW_S]
            audit = audit_inference(classified.kind, classified.facts, recent, state.sm)
            if audit is not None:
                audits[classified.text_key] = audit
        if not changed and not audits and not self.audits:
            return  # the same kinds and no audits (most rounds): the same documents
        self.audits = audits
        # A kind that did not change keeps its document (most rounds classify nothing anew);
        # an inference audit's figures move every round, so its document is built again.
        shown = self._documents_of
        self._documents_of = {
            key: (kind, shown[key][1] if key not in audits and key in shown
                  and shown[key][0] is kind else
                  {**kind.as_dict(), "inference": audits[key].as_dict()
                   if key in audits else None})
            for key, kind in self.kinds.items()}
        self._documents = {key: doc for key, (_, doc) in self._documents_of.items()}

    def documents(self) -> dict[str, dict[str, Any]]:
        """Each process's kind document (Kind.as_dict) with its inference audit under
        "inference" (None for a process that is not an inference workload). Built in
        `refresh` when a round changed a kind, or has inference audits (every /v1/now asks for
        them): the same object until then, to be read, never changed."""
        return self._documents
