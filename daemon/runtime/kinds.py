"""Workload kinds, kept up to date beside the tick: the facts each GPU process shows
(daemon.sources.kindfacts, read at most every few seconds per process) and the frame markers the
stack sampler saw in any of its threads (runtime/attribution.py), classified by
daemon.analysis.kinds. `refresh` runs in discovery's thread; `kinds` is swapped whole, so
readers on the event loop see one round or the next, never half of one.

A job whose kind the config sets ([kinds.jobs]: job label -> kind) gets that kind instead of the
classified one, with the evidence "set in config" and what the classifier would have said.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import fields
from operator import attrgetter
from typing import Any, NamedTuple

from daemon.analysis.inference_audit import InferenceAudit, audit_inference
from daemon.analysis.kinds import (
    CONFIGURED,
    INFERENCE_KINDS,
    Kind,
    classify_kind,
    gpu_use_shape,
)
from daemon.analysis.ledger import JobLabeler
from daemon.analysis.window_ticks import WINDOW_S as MARKER_WINDOW_S  # markers this recent count
from daemon.sources.kindfacts import KindFacts, KindFactsReader
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


# KindFacts' fields that say when a read was made, not what it found
_READ_TIMES = ("sockets_read_at", "maps_read_at")
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
                connections_over_s=observed.connections_over_s)


class _Classified(NamedTuple):
    """One process's kind as the last round left it, with what it was classified from."""

    signature: tuple[object, ...]  # what the classifier read: the same again, the same kind
    kind: Kind
    facts: KindFacts | None  # the reading signed, and its signature (facts_signature)
    facts_signature: tuple[object, ...] | None
    text_key: str  # daemon.wire.process_key


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
        self._memo: dict[tuple[int, float], _Classified] = {}
        self._gpu_use: dict[tuple[int, float], deque[bool]] = {}
        # when each process's kernels last ran (a read that said so): kind evidence over the
        # markers' window, beyond the shape's last GPU_USE_READS reads
        self._kernels_at: dict[tuple[int, float], float] = {}
        # the inference audit of each inference process (daemon.analysis.inference_audit)
        self.audits: dict[str, InferenceAudit] = {}
        self._sm: dict[tuple[int, float], deque[float]] = {}
        self._documents: dict[str, dict[str, Any]] = {}  # documents(), this round's
        self._documents_of: dict[str, tuple[Kind, dict[str, Any]]] = {}  # ... and their kinds

    def refresh(self, processes: Iterable[tuple[int, float, str, Mapping[str, str]]],
                markers: Mapping[tuple[int, float], Mapping[str, float]], now: float,
                sm_shares: Mapping[tuple[int, float], float] | None = None,
                kernels_ran: Mapping[tuple[int, float], bool] | None = None) -> None:
        """(pid, start_time, command, owner) of each GPU process, the frame markers seen in
        its stacks (a copy taken on the loop), its SM share now (percent, over its GPUs) and
        whether its kernels ran since the last round (any tick; without it: its SM share now
        above 0): read what is due, classify all, audit the inference ones."""
        procs = list(processes)
        shares_now = sm_shares or {}
        ran_now = kernels_ran or {}
        readings: dict[tuple[int, float], deque[float]] = {}
        uses: dict[tuple[int, float], deque[bool]] = {}
        kernels_at: dict[tuple[int, float], float] = {}
        old_sm, old_uses, old_at = self._sm, self._gpu_use, self._kernels_at
        for pid, start, _, _ in procs:
            key = (pid, start)
            kept = old_sm.get(key) or deque(maxlen=SM_READINGS)
            used = old_uses.get(key) or deque(maxlen=GPU_USE_READS)
            share = shares_now.get(key)
            if share is not None:
                kept.append(share)
            ran = ran_now.get(key)
            if ran is not None or share is not None:
                used.append(bool(ran) if ran is not None else bool(share))
            if used and used[-1]:
                kernels_at[key] = now
            elif key in old_at:
                kernels_at[key] = old_at[key]
            readings[key], uses[key] = kept, used
        self._sm, self._gpu_use, self._kernels_at = readings, uses, kernels_at
        self.reader.refresh(((pid, start) for pid, start, _, _ in procs), now)
        reading = self.reader.get
        round_of = now // RECLASSIFY_EVERY_S
        before = self._memo
        memo: dict[tuple[int, float], _Classified] = {}
        for pid, start, command, owner in procs:
            key = (pid, start)
            facts = reading(key)
            last = before.get(key)
            # A reading the reader handed back unchanged (most rounds) keeps its signature.
            signed = (last.facts_signature if last is not None and last.facts is facts
                      else facts_signature(facts))
            seen = markers.get(key) or {}
            shape = gpu_use_shape(uses[key])
            ran_at = kernels_at.get(key)
            signature = (signed, frozenset(seen.items()), command, shape, ran_at is None,
                         round_of)
            if last is not None and last.signature == signature:
                kind = last.kind
            else:
                kind = classify_kind(command, facts, dict(seen), now=now,
                                     window_s=MARKER_WINDOW_S, gpu_use=shape, kernels_at=ran_at)
                if self.job_kinds:
                    label = self.labeler.label(command, owner)
                    if label in self.job_kinds:
                        kind = configured_kind(self.job_kinds[label], label, kind)
            memo[key] = _Classified(signature, kind, facts, signed,
                                    last.text_key if last is not None else process_key(*key))
        self._memo = memo
        self.kinds = {c.text_key: c.kind for c in memo.values()}
        audits = {}
        for key, classified in memo.items():
            kind = classified.kind
            if kind.kind not in INFERENCE_KINDS:
                continue  # (audit_inference's answer for every other kind: no audit)
            recent = [m for m, ts in (markers.get(key) or {}).items()
                      if now - ts <= MARKER_WINDOW_S]
            audit = audit_inference(kind, classified.facts, recent, readings.get(key, ()))
            if audit is not None:
                audits[classified.text_key] = audit
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
        "inference" (None for a process that is not an inference workload). Built once a
        round, in `refresh` (every /v1/now asks for them): the same object until the next
        round, to be read, never changed."""
        return self._documents
