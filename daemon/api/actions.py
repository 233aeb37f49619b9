"""What one key in the TUI does to a recommendation: show a patch, copy commands, send SIGTERM to
an idle process, or resize the instance through boto3 (AWS Systems Manager's AWS-ResizeInstance
runbook: a host cannot stop, modify and start itself, the stop takes it and the daemon down).

`apply` always describes what it will do; with dry_run=False it does it. Actions that change the
host (SIGTERM, resize) run only when the config allows actions ([api].allow_actions); their dry
run says so beforehand (`refused`, and its text), so nobody confirms an action that the real run
refuses with 403. The rest only return text for the user to read or copy.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable, Mapping
from typing import Any

import psutil

from daemon import clock
from daemon.analysis.kinds import (
    NOTEBOOK,
    PARENT_SOCKETS_UNKNOWN,
    classify_kind,
    held_on_all_addresses,
    parent_sockets_unknown,
    served_on,
    serving_parent,
)
from daemon.analysis.stack_rules import FD_WAITS
from daemon.sources.kindfacts import read_kind_facts
from daemon.sources.procs import read_argv
from daemon.sources.redact import redact_argv
from daemon.sources.safe_text import one_line
from daemon.wire import ActionResult, crop, signal_command

# How close a live process's create time must be to the recommendation's to be the same process.
START_TIME_TOLERANCE_S = 0.05
# Amazon's runbook that stops an instance, changes its type and starts it, run by AWS Systems
# Manager on AWS's side: the daemon asks for it and goes down with its host at the stop.
RESIZE_RUNBOOK = "AWS-ResizeInstance"


class ActionError(Exception):
    """The action cannot run; `status` is the HTTP status the API answers with."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


def apply(recommendation: Mapping[str, Any], dry_run: bool = True, *,
          allow_actions: bool = False, ec2_factory: Callable[[str], Any] | None = None,
          ssm_factory: Callable[[str], Any] | None = None,
          instance_id: str | None = None, accept_preliminary: bool = False) -> ActionResult:
    """Describe (dry run) or perform the action of one recommendation document. `ec2_factory`
    and `ssm_factory`: a boto3 client of that service for a region (default: boto3's own).
    `accept_preliminary`: the caller confirmed a resize on preliminary evidence a second time
    (without it such a resize is refused, 409: preliminary_reason)."""
    action = dict(recommendation.get("action") or {})
    kind = str(action.get("kind") or "none")
    rec_id = str(recommendation.get("id", ""))
    if kind == "show_patch":
        patch = action.get("patch") or ""
        # The rule words it for the workload's kind (rules.base.patch_text); older documents
        # without a text get one that assumes no kind.
        text = action.get("text")
        if not isinstance(text, str) or not text:
            text = f"a patch for {action.get('file') or 'your code'}: review it, apply it, " \
                   "restart the program"
        return ActionResult(rec_id, kind, dry_run, True, text, patch=str(patch))
    if kind == "copy_commands":
        # Built by the rules from command lines redacted at the source; not redacted again,
        # which would break their own shell (TOKEN=$(curl ...) is not a secret).
        commands = tuple(str(c) for c in action.get("commands") or ())
        return ActionResult(rec_id, kind, dry_run, True,
                            "commands to run yourself (copied to the clipboard in mlcost-top)",
                            commands=commands)
    if kind == "sigterm":
        evidence = recommendation.get("evidence")
        seen = evidence.get("no_sign_of_work") if isinstance(evidence, Mapping) else None
        return _sigterm(rec_id, action, dry_run, allow_actions,
                        seen if isinstance(seen, Mapping) else None)
    if kind == "resize":
        return _resize(rec_id, action, dry_run, allow_actions, instance_id,
                       ec2_factory or _default_client("ec2"),
                       ssm_factory or _default_client("ssm"),
                       None if accept_preliminary else preliminary_reason(recommendation))
    return ActionResult(rec_id, kind, dry_run, True,
                        "nothing to do on this host: this recommendation is advice only")


def preliminary_reason(recommendation: Mapping[str, Any]) -> str | None:
    """Why its evidence is not enough yet ('preliminary, confidence low: 1 min observed of the
    30 h this advice needs'), None when it is. A resize stops every process on the host, a
    server's too: on such evidence it is done only when confirmed a second time."""
    if not recommendation.get("preliminary") and recommendation.get("confidence") != "low":
        return None
    seen, needed = recommendation.get("evidence_seconds"), \
        recommendation.get("evidence_needed_seconds")
    if isinstance(seen, int | float) and isinstance(needed, int | float):
        return (f"preliminary, confidence low: {clock.duration(seen)} observed of the "
                f"{clock.duration(needed)} this advice needs")
    return "preliminary, confidence low"


PRELIMINARY_CONFIRM = ('confirmed a second time ({"dry_run": false, "accept_preliminary": '
                       'true}), or once the evidence is in')


def refusal(allow_actions: bool, what: str) -> str | None:
    """Why the real run of an action that changes the host will be refused (403), or None
    when this daemon takes actions: the same words in the dry run and in the refusal."""
    if allow_actions:
        return None
    return (f"this mlcostd does not take actions ({what}); set [api].allow_actions = true in "
            "its config to let the API do it, or do it yourself")


def _refuse_unless_allowed(allow_actions: bool, what: str) -> None:
    reason = refusal(allow_actions, what)
    if reason is not None:
        raise ActionError(reason, status=403)


def _dry_run(rec_id: str, kind: str, would: str, refused: str | None,
             steps: tuple[str, ...]) -> ActionResult:
    """A dry run of an action that changes the host: what it would do, and when the real run
    will be refused, that and why (in `refused` and at the end of the text)."""
    if refused is not None:
        would += f"; but the real run will be refused (403): {refused}"
    return ActionResult(rec_id, kind, True, False, would, steps=steps, refused=refused)


def _sigterm(rec_id: str, action: Mapping[str, Any], dry_run: bool,
             allow_actions: bool, seen: Mapping[str, Any] | None = None) -> ActionResult:
    """`seen`: what the rules saw of the process when they offered it (idle_gpu_held's
    evidence "no_sign_of_work"), for _refuse_a_server."""
    pid, start = action.get("pid"), action.get("start_time")
    if not isinstance(pid, int) or not isinstance(start, int | float):
        raise ActionError(f"recommendation {rec_id} names no process (pid {pid!r})", 422)
    # The process is held by a pidfd from before its identity is checked to the signal: a
    # start time read after the pidfd opened that matches says the pidfd is that process, and
    # the signal goes through it, never to whoever has the pid by then (the target's own
    # /proc reads below can take it hundreds of milliseconds; it could exit in them and another
    # user's process take its pid: probe 138).
    pidfd = _pidfd(pid)
    try:
        return _sigterm_held(rec_id, pid, float(start), pidfd, dry_run, allow_actions, seen)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _pidfd(pid: int) -> int | None:
    """A pidfd of `pid` (None where the kernel has none: before Linux 5.3)."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        raise ActionError(f"pid {pid} has exited; nothing to stop", 410) from None
    except OSError as exc:
        if exc.errno == errno.ENOSYS:
            return None
        raise ActionError(f"cannot hold pid {pid} to signal it ({exc.strerror})", 403) from None


def _signal(pid: int, pidfd: int | None, signum: int) -> None:
    """`signum` to the process held by `pidfd` (to `pid` where there is no pidfd)."""
    if pidfd is None:
        os.kill(pid, signum)
    else:
        signal.pidfd_send_signal(pidfd, signum)


def _sigterm_held(rec_id: str, pid: int, start: float, pidfd: int | None, dry_run: bool,
                  allow_actions: bool, seen: Mapping[str, Any] | None = None) -> ActionResult:
    try:
        proc = psutil.Process(pid)
        created = proc.create_time()
        # The live argv, through the same redaction as every stored command line.
        # (cut with a visible … : a file name cut short read as another file's)
        command = crop(one_line(redact_argv(read_argv(pid))), 120)
    except (psutil.NoSuchProcess, psutil.ZombieProcess, FileNotFoundError):
        raise ActionError(f"pid {pid} has exited; nothing to stop", 410) from None
    except (psutil.AccessDenied, PermissionError):
        raise ActionError(f"no permission to inspect pid {pid}; run mlcostd as root", 403) \
            from None
    if abs(created - start) > START_TIME_TOLERANCE_S:
        raise ActionError(f"pid {pid} is now a different process (started {created:.2f}, the "
                          f"recommendation is about {start:.2f}); not signalled", 410)
    _refuse_a_server(pid, proc, seen)
    stopped = _is_stopped(proc)
    # (each guarded by the start time, for a person who pastes them later: signal_command)
    steps = (f"{signal_command(pid, created)}   # {command}",
             *((f"{signal_command(pid, created, 'CONT')}   # it is stopped (state T): it ends "
                "once continued",) if stopped else ()))
    also = " and SIGCONT (it was stopped: a stopped process ends only once continued)" \
        if stopped else ""
    if dry_run:
        return _dry_run(rec_id, "sigterm", f"would send SIGTERM to pid {pid}{also} ({command})",
                        refusal(allow_actions, f"SIGTERM to pid {pid}"), steps)
    _refuse_unless_allowed(allow_actions, f"SIGTERM to pid {pid}")
    try:
        _signal(pid, pidfd, signal.SIGTERM)
        if stopped:
            # As a shell's `kill` does for a stopped job: SIGTERM stays pending in a stopped
            # process (Ctrl-Z, SIGSTOP) until it is continued, and its GPU stays held.
            _signal(pid, pidfd, signal.SIGCONT)
    except ProcessLookupError:
        raise ActionError(f"pid {pid} has exited; nothing to stop", 410) from None
    except PermissionError:
        raise ActionError(f"no permission to signal pid {pid}; run mlcostd as root", 403) \
            from None
    return ActionResult(rec_id, "sigterm", False, True, f"sent SIGTERM to pid {pid}{also}",
                        steps=steps)


def _is_stopped(proc: psutil.Process) -> bool:
    """Stopped by a signal (state T: Ctrl-Z, SIGSTOP), not a debugger's stop (t), which
    SIGCONT does not end."""
    try:
        return proc.status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def _refuse_a_server(pid: int, proc: psutil.Process,
                     seen: Mapping[str, Any] | None = None) -> None:
    """The rules never offer a server SIGTERM; this checks again, live, right before a signal
    (and in the dry run): a process that listens and has a client connected now is serving,
    whatever the recommendation said when it was made. ActionError 409 when it serves, or may
    serve datagrams where the rules would look first (_may_serve_datagrams: `seen`, what they
    saw when they offered the SIGTERM)."""
    said = _serving(pid, proc, seen)
    if said is not None:
        raise ActionError(f"pid {pid} {said}; mlcostd never stops a server: scale it down or "
                          "stop it yourself", status=409)


def _may_serve_datagrams(pid: int, ports: tuple[int, ...],
                         seen: Mapping[str, Any] | None) -> str | None:
    """Why `pid`, which holds unconnected UDP sockets on all addresses on ports in the
    ephemeral range (`ports`, KindFacts.udp_wildcard_ports: a client's or a server's), may be
    serving datagrams, as idle_verdict reads it: unless the rules saw all of them (`seen`,
    idle_gpu_held's evidence "no_sign_of_work") with stacks that did not wait on its sockets
    (a statsd client sleeping in time.sleep), its stacks now are not known: look first."""
    if not ports:
        return None
    seen = seen or {}
    known, waits = seen.get("udp_wildcard_ports"), seen.get("waiting_in")
    top = waits[0] if isinstance(waits, list) and waits else None
    reason = top.get("reason") if isinstance(top, Mapping) else None
    if (isinstance(known, list) and set(ports) <= set(known) and isinstance(reason, str)
            and not reason.startswith(FD_WAITS)):
        return None
    return (f"may be serving datagrams (it holds {held_on_all_addresses(ports)}, a client's "
            "socket or a server's; the stacks its SIGTERM was offered on "
            + ("wait on its sockets" if isinstance(reason, str) and reason.startswith(FD_WAITS)
               else "did not see it hold them") +
            f"): look with `ss -uanp | grep 'pid={pid},'` first")


def _serving(pid: int, proc: psutil.Process,
             seen: Mapping[str, Any] | None = None) -> str | None:
    """How `pid` serves now (it listens and has a client connected, or it is the worker of a
    parent that listens and has served: Kind.serving_parent, as the rules have it), or may
    (_may_serve_datagrams), or None."""
    now = clock.now()
    try:
        facts = read_kind_facts(pid, now)
        argv = " ".join(proc.cmdline())[:4096]  # for the classifier only; never shown
        ppid = proc.ppid()
    except (FileNotFoundError, ProcessLookupError, psutil.NoSuchProcess):
        raise ActionError(f"pid {pid} has exited; nothing to stop", 410) from None
    except (OSError, psutil.Error):
        return None  # unreadable: the signal itself says what it can
    kind = classify_kind(argv, facts)
    if kind.serves:
        where = served_on(kind.listening_ports, kind.udp_ports, kind.unix_listening)
        clients = ("" if kind.udp_ports and not facts.accepted_connections  # (none to see)
                   else f" and has {facts.accepted_connections} client(s) connected now")
        return f"is serving (it listens on {where}{clients})"
    if kind.sockets_unknown:  # no port seen in a cut table is not "no port"
        return (f"may be serving ({PARENT_SOCKETS_UNKNOWN}): look with `ss -ltnp` first")
    datagrams = _may_serve_datagrams(pid, facts.udp_wildcard_ports, seen)
    if datagrams is not None:
        return datagrams
    # A parent that serves now makes it that server's worker, as the rules read it: not under
    # a job launcher (kinds.serving_parent), not for a notebook (a kernel is its user's), not
    # when the parent is this daemon (the simulated host's workloads are its children).
    if kind.kind == NOTEBOOK or ppid <= 1 or ppid == os.getpid():
        return None
    try:
        parent = read_kind_facts(ppid, now)
    except OSError:
        return None
    if parent_sockets_unknown(ppid, parent, facts):
        return (f"may be serving (it may work for its parent, pid {ppid}, a server: whether "
                "the parent listens on a port is not known, as its network namespace's TCP "
                "table is longer than mlcostd reads): look with `ss -ltnp` first")
    if not serving_parent(ppid, parent, facts):
        return None
    ports = served_on(parent.listening_ports, parent.udp_ports, 0)
    return (f"is serving (it works for its parent, pid {ppid}, which listens on {ports} "
            "and has served clients)")


def _default_client(service: str) -> Callable[[str], Any]:
    def client(region: str) -> Any:
        import boto3

        return boto3.client(service, region_name=region)  # type: ignore[call-overload]

    return client


def _is_dry_run_ok(error: Exception) -> bool:
    code = getattr(error, "response", {}).get("Error", {}).get("Code")
    return code == "DryRunOperation"


# Why a resize is shown as commands only (the TUI says it before `a` too).
NOT_ON_EC2 = ("this host has no EC2 instance id (it is not on EC2, or its metadata service "
              "did not say; [instance].id sets it)")
NO_INSTANCE_ID = "INSTANCE_ID"


def resize_steps(region: str, instance_id: str, target: str) -> tuple[str, ...]:
    """The AWS CLI command of a resize, the call boto3 makes: safe to run anywhere, the host
    itself included (the runbook runs on AWS's side)."""
    return (f"aws ssm start-automation-execution --region {region} --document-name "
            f"{RESIZE_RUNBOOK} --parameters InstanceId={instance_id},InstanceType={target}",)


def _resize(rec_id: str, action: Mapping[str, Any], dry_run: bool, allow_actions: bool,
            instance_id: str | None, ec2_factory: Callable[[str], Any],
            ssm_factory: Callable[[str], Any], preliminary: str | None = None) -> ActionResult:
    """`preliminary`: why its evidence is not enough yet, unless the caller confirmed it a
    second time (None): the dry run says so, the real run is refused."""
    if action.get("provider") not in (None, "aws"):
        raise ActionError(f"resizing is only automated on AWS, not {action.get('provider')}; "
                          "change the instance type in your provider's console", 422)
    target = action.get("to")
    if not target:
        raise ActionError(f"recommendation {rec_id} names no instance type to resize to", 422)
    instance_id = instance_id or action.get("instance_id")
    region = str(action.get("region") or "us-east-1")
    steps = resize_steps(region, str(instance_id or NO_INSTANCE_ID), str(target))
    if not instance_id:
        # Not a known EC2 instance: nothing to call, only the commands to run where it is.
        return ActionResult(rec_id, "copy_commands", dry_run, False,
                            f"mlcostd can only show the commands: {NOT_ON_EC2}; run them with "
                            f"your AWS credentials, {NO_INSTANCE_ID} replaced by the "
                            "instance's id", commands=steps)
    ec2 = ec2_factory(region)
    # AWS's own dry run of what the runbook does with the caller's permissions (it is given
    # no role of its own): permission and parameter checks without a change.
    checks = []
    for name, call in (
        ("stop", lambda: ec2.stop_instances(InstanceIds=[instance_id], DryRun=True)),
        ("start", lambda: ec2.start_instances(InstanceIds=[instance_id], DryRun=True)),
    ):
        try:
            call()
            checks.append(f"{name}: allowed")
        except Exception as exc:  # botocore ClientError: DryRunOperation means it would work
            if _is_dry_run_ok(exc):
                checks.append(f"{name}: allowed")
            else:
                raise ActionError(f"AWS refused the dry run of {name}: {exc}", 502) from None
    if dry_run:
        return _dry_run(rec_id, "resize",
                        f"would ask AWS Systems Manager to run {RESIZE_RUNBOOK} on "
                        f"{instance_id}: stop it, change it from {action.get('from')} to "
                        f"{target} and start it ({'; '.join(checks)}); the host and this "
                        "daemon go down for a few minutes and come back on the new type"
                        + (f"; its evidence is {preliminary}: the real run is done only "
                           f"when {PRELIMINARY_CONFIRM}" if preliminary else ""),
                        refusal(allow_actions, f"resize {instance_id} to {target}"), steps)
    _refuse_unless_allowed(allow_actions, f"resize {instance_id} to {target}")
    if preliminary is not None:
        raise ActionError(f"not resized: its evidence is {preliminary}, and a resize stops "
                          f"every process on the host; it is done only when "
                          f"{PRELIMINARY_CONFIRM}", 409)
    try:
        started = ssm_factory(region).start_automation_execution(
            DocumentName=RESIZE_RUNBOOK,
            Parameters={"InstanceId": [instance_id], "InstanceType": [str(target)]})
    except Exception as exc:
        raise ActionError(f"resize of {instance_id} to {target} failed: AWS Systems Manager "
                          f"did not start {RESIZE_RUNBOOK}: {exc}", 502) from None
    execution = started.get("AutomationExecutionId", "?")
    return ActionResult(rec_id, "resize", False, True,
                        f"resizing {instance_id} to {target}: AWS Systems Manager runs "
                        f"{RESIZE_RUNBOOK} (execution {execution}), which stops this host, "
                        "changes its type and starts it; this daemon goes down with the host "
                        "and comes back with it", steps=steps)
