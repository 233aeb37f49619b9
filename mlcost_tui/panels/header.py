"""The header: host, instance, price and its source, burn, waste, spend today, the potential
savings (the recommendations combined, never more than the bill), idle alerts and the state of
the connection to the daemon."""

from __future__ import annotations

from typing import NamedTuple

from rich.text import Text
from textual.visual import VisualType
from textual.widgets import Static

from daemon.clock import duration, local_time
from daemon.wire import Budget, target_pid
from mlcost_tui import format as fmt
from mlcost_tui.messages import HostSnapshot
from mlcost_tui.thresholds import BAD, GOOD, MUTED, SLOW_RESPONSE_S, WARN


def connection_text(snap: HostSnapshot | None, paused: bool, retry_s: float | None) -> Text:
    text = Text()
    if snap is None:
        text.append("● connecting…", style=WARN)
    elif snap.error is not None:
        if snap.refused:  # it answered: "no daemon" and a countdown misled (probe 141 L11)
            text.append("✕ refused by the daemon: check --token-file", style="bold " + BAD)
            retry_s = None
        elif snap.stalled:  # there, hung or stopped (SIGSTOP)
            text.append("● daemon not answering", style="bold " + WARN)
        else:
            text.append("✕ no daemon", style="bold " + BAD)
        if retry_s is not None:
            text.append(f" · retrying in {retry_s:.0f}s", style=MUTED)
        if snap.now is not None:  # what the panels show (dimmed) is that old
            text.append_text(as_of(snap.answered_at))
    elif snap.now is not None and snap.now.ts is None:  # answering, its first tick not taken
        text.append("● starting: no tick yet", style="bold " + WARN)
    elif snap.latency_s > SLOW_RESPONSE_S:
        text.append(f"● slow daemon ({snap.latency_s:.1f}s)", style=WARN)
    else:
        text.append("● live", style=GOOD)
    if paused:
        text.append("  ⏸ PAUSED (p to resume)", style="bold reverse " + WARN)
    return text


def as_of(answered_at: float | None) -> Text:
    """' · as of 01:58:00, 12 s ago': how old the figures shown are, while the daemon does not
    answer (they stayed at full colour, the burn and dead processes read as current)."""
    if answered_at is None:
        return Text(" · showing older figures", style="bold " + WARN)
    return Text(f" · as of {fmt.clock_time(answered_at)}, {fmt.ago(answered_at)}",
                style="bold " + WARN)


def store_problem(store: object) -> str:
    """What stops the daemon's store from recording now (/v1/now store.problem: a full disk,
    a damaged file...), "" when nothing does."""
    problem = store.get("problem") if isinstance(store, dict) else None
    return problem if isinstance(problem, str) else ""


def price_warning(price: object) -> str:
    """The daemon's warning that its price may be stale ("" when it has none). The wire's
    Price carries it as `warning` (from /v1/now price.warning); an older daemon has none."""
    warning = getattr(price, "warning", "") if price is not None else ""
    return warning if isinstance(warning, str) else ""


def stale_price_badge(warning: str) -> Text:
    """' ⚠ stale price · run <refresh command>': the command is what fixes it."""
    badge = Text(" ⚠ stale price", style="bold reverse " + WARN)
    _, tick, rest = warning.partition("run `")
    command = rest.partition("`")[0] if tick else ""
    badge.append(f" · {command}" if command else " · see mlcostd check", style=WARN)
    return badge


def budget_style(budget: Budget) -> str:
    """A budget's share in the header: red once crossed, warning from 80 %."""
    return BAD if budget.crossed else WARN if budget.share >= 0.8 else MUTED


def target_label(target: str) -> str:
    """A target in words: 'gpu:5' is 'GPU 5 idle' (an event's), '1234:1700000000.000' (a
    process key) 'process 1234', 'host' the whole host."""
    kind, _, rest = target.partition(":")
    if kind == "gpu" and rest:
        return f"GPU {rest} idle"
    pid = target_pid(target)
    if pid is not None:
        return f"process {pid}"
    return "the whole host" if target == "host" else target


# Columns from which the header says everything in full, in its usual order.
WIDE = 110

# What `fit` may leave to the edge's cut: a cuttable text part shown last keeps its place while
# at least this many of its cells show.
MIN_CUT_CELLS = 10


class Part(NamedTuple):
    """A part of a header line: its text, its rank (0: never dropped; the highest rank goes
    first), whether the edge may cut it (words, never a figure) and a shorter form of it, said
    before any part is dropped."""

    text: Text
    rank: int
    cut: bool = False
    short: Text | None = None


def fit(parts: list[Part], width: int) -> Text:
    """The parts, in their order, that fit in `width` cells. First the shorter forms, the
    highest rank first; then whole parts are dropped, the highest rank first (of equal ranks
    the rightmost): a figure is shown whole or not at all (the edge cut `today $612.00 of
    $8…`, probe 154 L3). A cuttable part shown last is left to the edge once at least
    MIN_CUT_CELLS of it show; rank-0 parts are never dropped (the edge cuts what of them does
    not fit). `width` <= 0 (not laid out yet): all, in full."""
    shown = list(parts)

    def cells() -> int:
        return sum(part.text.cell_len for part in shown)

    def order(i: int) -> tuple[int, int]:
        return shown[i].rank, i

    while width > 0 and cells() > width:
        last = shown[-1] if shown else None
        if last is not None and last.cut and \
                cells() - last.text.cell_len + MIN_CUT_CELLS <= width:
            break
        shorter = [i for i, part in enumerate(shown) if part.short is not None]
        if shorter:
            i = max(shorter, key=order)
            shown[i] = Part(shown[i].short or Text(), shown[i].rank, shown[i].cut)
            continue
        droppable = [i for i, part in enumerate(shown) if part.rank > 0]
        if not droppable:
            break
        del shown[max(droppable, key=order)]
    line = Text()
    for part in shown:
        line.append_text(part.text)
    return line


class HeaderPanel(Static):
    DEFAULT_CSS = """
    HeaderPanel { height: 3; padding: 0 1; background: $boost; text-wrap: nowrap;
        text-overflow: ellipsis; }
    """

    # What the header was last shown for (show's arguments), to lay it out again on a resize;
    # None while it shows a plain text (starting, a replay being opened).
    shown_for: tuple[HostSnapshot | None, bool, float | None, str | None, int | None,
                     tuple[str, ...], tuple[int, float | None] | None] | None = None

    def show(self, snap: HostSnapshot | None, paused: bool = False,
             retry_s: float | None = None, replay: str | None = None,
             fleet: int | None = None, alert_hosts: tuple[str, ...] = (),
             kept_spend: tuple[int, float | None] | None = None) -> None:
        """The header for `snap`; `replay` (the replay's position and keys) replaces the
        connection state when replaying a recorded store; `fleet` (the number of daemons)
        says `snap` is the fleet's totals, which have no tick of their own (nor one price),
        `alert_hosts` names the fleet's hosts with idle alerts, and `kept_spend` (how many
        hosts, as of when the oldest answered) says today's spend counts the last known spend
        of hosts that did not answer (sources.fleet_header)."""
        self._show(snap, paused, retry_s, replay, fleet, alert_hosts, kept_spend)
        self.shown_for = (snap, paused, retry_s, replay, fleet, alert_hosts, kept_spend)

    def on_resize(self) -> None:
        """Laid out again for the new width (shorter under WIDE columns), whether or not a
        poll redraws it: under a dialog none does, and the 200-column form stayed at 80."""
        if self.shown_for is not None:
            self.show(*self.shown_for)

    def _show(self, snap: HostSnapshot | None, paused: bool, retry_s: float | None,
              replay: str | None, fleet: int | None, alert_hosts: tuple[str, ...],
              kept_spend: tuple[int, float | None] | None = None) -> None:
        line1: list[Part] = []
        line2: list[Part] = []
        now = snap.now if snap is not None else None
        # Under WIDE columns each line says what matters first and shorter (at 80 the price,
        # its stale warning and the idle alerts went past the edge); what still does not fit
        # is dropped whole, the least needed first (fit).
        narrow = 0 < self.size.width < WIDE
        if not narrow:
            line1.append(Part(Text("mlcost-top ", style="bold"), 6, False))
        if now is None:
            line1.append(Part(Text(snap.target if snap else "", style=MUTED), 0, True))
        else:
            line1.append(Part(Text(now.hostname or "?", style="bold"), 0, True))
            if now.simulated:
                line1.append(Part(Text(" (simulated)" if narrow else
                                   f" (simulated: {now.simulated})", style=MUTED), 4, True))
            instance = now.instance
            if instance.get("type"):
                lifecycle = instance.get("lifecycle", "")
                line1.append(Part(Text(
                    f"  {instance.get('provider', '')} {instance['type']}"
                    + (f" {lifecycle}" if lifecycle != "on-demand" else "")
                    if narrow else
                    f"  {instance.get('provider', '')} {instance['type']} "
                    f"{instance.get('region', '')} {lifecycle}"), 3, False))
            price = now.price
            if fleet is None:  # a fleet has no one price ("price -"): each host has its own
                shown = Text("  price ")
                shown.append(fmt.money(price.per_hour if price else None, "/h"), style="bold")
                line1.append(Part(shown, 1, False))
                warning = price_warning(price)
                if warning:
                    badge = stale_price_badge(warning)
                    # the warning whole; the command that fixes it may be cut by the edge
                    cut = len(" ⚠ stale price")
                    line1.append(Part(badge[:cut], 2, False))
                    line1.append(Part(badge[cut:], 5, True))
                elif price and price.source:
                    line1.append(Part(Text(f" ({price.source[:60]})", style=MUTED), 5, True))
            # No tick yet (a daemon just started): the rates are not known, whatever an older
            # daemon says ($0.00/h for a host that bills, probe 154 H1). Kept figures of a
            # daemon (or a whole fleet) that does not answer now: dimmed, as the panels are.
            ticked = now.ts is not None or replay is not None
            old = "dim " if snap is not None and snap.error is not None else ""
            burn = Text("burn ")
            burn.append(fmt.money(now.burn_per_hour if ticked else None, "/h"),
                        style="bold " + old)
            if now.unseen_gpus:  # paid for, not listed by NVML: part of the burn, all wasted
                what = ("unseen" if narrow else
                        f"GPU{'s' if now.unseen_gpus != 1 else ''} not seen by NVML")
                burn.append(f" ({now.unseen_gpus} {what}: "
                            f"{fmt.money(now.unseen_per_hour, '/h')})", style="bold " + WARN)
            line2.append(Part(burn, 0, False))
            wasted_text = Text("  wasted ")
            wasted = now.wasted_per_hour if ticked else None
            wasted_text.append(fmt.money(wasted, "/h"), style="bold " + old + (
                BAD if wasted and wasted > 0.005 else ""))
            line2.append(Part(wasted_text, 0, False))
            spend = Text("  today ")
            spend.append(fmt.money(now.spend_today), style="bold " + old)
            if now.spend_today_since is not None:  # a replay of a store that holds the day
                # from then on only: counted from there, not the day's whole spend
                since = local_time(now.spend_today_since, date=False, seconds=False)
                spend.append(f" since {since}", style=MUTED)
            short_spend: Text | None = None
            if kept_spend is not None:  # a fleet: hosts not answering, their last spend in it
                count, as_of_ts = kept_spend
                when = f" as of {fmt.clock_time(as_of_ts)[:5]}" if as_of_ts is not None else ""
                short_spend = spend.copy()  # narrower: `(2 as of 10:14)`, the note kept
                spend.append(f" ({fmt.plural(count, 'host')}{when})", style=WARN)
                short_spend.append(f" ({count}{when})", style=WARN)
            spend_parts: list[Part] = [Part(spend, 2, short=short_spend)]
            daily, monthly = now.host_budget("daily"), now.host_budget("monthly")
            if daily is not None:  # [cost.budgets.host] daily: how much of it is gone
                spend_parts.append(Part(Text(f" of {fmt.money(daily.limit)} ({daily.share:.0%})",
                                         style=budget_style(daily)), 4, False))
            if monthly is not None:  # and monthly: the month's spend beside it
                month = Text("  month ")
                month.append(fmt.money(monthly.spent), style="bold")
                month.append(f" of {fmt.money(monthly.limit)} ({monthly.share:.0%})",
                             style=budget_style(monthly))
                spend_parts.append(Part(month, 6, False))
            savings = Text()
            short_savings: Text | None = None  # said where the whole line does not fit
            if not now.recommendations and fleet is None:
                # None yet, as the recommendations panel says: not a known $0.00 (the first
                # rules run a period after the daemon starts; until then nothing is known),
                # live and at a replayed tick alike.
                savings.append("  saves " if narrow else "  potential savings ")
                savings.append("?", style="bold")
                every = now.evaluate_every_s
                short_savings = savings.copy()
                short_savings.append(" (none yet)", style=MUTED)
                savings.append(" (none yet)" if narrow or replay is not None else
                               f" (none yet: the rules look every "
                               f"{duration(every) if every and every > 0 else '~30 s'})",
                               style=MUTED)
            elif now.potential_savings_per_month is not None:
                # The combined figure: what the recommendations save together (<= the bill).
                savings.append("  saves " if narrow else "  potential savings ")
                savings.append(fmt.money(now.potential_savings_per_month, "/month"),
                               style="bold " + GOOD)
                if any(r.preliminary for r in now.recommendations):
                    savings.append(" (some preliminary)", style=WARN)
            alerts = now.idle_alerts
            warnings: list[Part] = []
            if now.nvml_status != "ok":
                warnings.append(Part(Text(f"  NVML: {now.nvml_status}", style=BAD), 1, False))
            if alerts or not narrow:
                count_text = Text("  idle alerts ")
                count_text.append(str(len(alerts)), style="bold " + (BAD if alerts else GOOD))
                warnings.append(Part(count_text, 1, False))
            if alerts and fleet is not None and len(alert_hosts) != 1:
                # the first alert's GPU, of no host said, read as the fleet's only one
                warnings.append(Part(Text(f" on {fmt.plural(len(alert_hosts), 'host')}",
                                          style=BAD), 3, True))  # as which GPU (below)
            elif alerts:
                where = f" on {alert_hosts[0][:30]}" if fleet is not None else ""
                detail = alerts[0].detail or target_label(alerts[0].target)
                said = Text(f"{where} ({detail})"[:60], style=BAD)
                # shorter: without how long ('GPU 2 idle for 15 min': 'GPU 2 idle')
                brief = detail.partition(" for ")[0]
                short = Text(f"{where} ({brief})"[:60], style=BAD) if brief != detail else None
                warnings.append(Part(said, 3, True, short))
            # Ranks (fit drops the highest first): burn and waste never; an NVML problem and the
            # idle alerts' count 1; today 2; which GPU is idle 3; the daily budget's share 4;
            # the savings 5 (the recommendations panel says them too); the month 6.
            # narrow: what is wrong (idle alerts) before the day's spend and its budgets, and
            # before what could be saved (the panel below says that too): with budgets set the
            # spend filled 80 columns and the idle alerts went past the edge
            savings_part: list[Part] = [Part(savings, 5, short=short_savings)] if savings else []
            line2 += (warnings + spend_parts + savings_part if narrow
                      else spend_parts + savings_part + warnings)
        # The status line: the state first, whole; then the error or the tick; the counts
        # last, said shorter before they are left out (`7 recommenda…`, probe 154 L3).
        line3: list[Part] = []
        if replay is not None:
            line3.append(Part(Text(replay, style="bold " + WARN), 0, True))
        else:
            line3.append(Part(connection_text(snap, paused, retry_s), 0, True))
            problem = store_problem(now.store if now is not None else None)
            if problem:  # (a full disk, a damaged file): ticks wait in the daemon's memory
                line3.append(Part(Text(f"  ⚠ store: {problem}"[:160], style="bold " + BAD),
                                  0, True))
        if snap is not None and snap.error is not None:
            if now is None:  # nothing to show yet: the error and its fix get the whole line
                line2.append(Part(Text(snap.error[:300], style=BAD), 0, True))
            else:
                line3.append(Part(Text(f"  {snap.error}"[:200], style=BAD), 1, True))
        elif now is not None and replay is None and now.ts is None:
            line3.append(Part(Text("  waiting for the daemon's first tick", style=MUTED), 1,
                              True))
        elif now is not None and replay is None:
            line3.append(Part(Text(f"  {fmt.plural(fleet, 'daemon')}, newest tick at "
                                   f"{fmt.clock_time(now.ts)}" if fleet is not None
                                   else f"  tick {now.tick} at {fmt.clock_time(now.ts)}",
                                   style=MUTED), 1))
            counts = (f"  {fmt.plural(len(now.gpus), 'GPU')}, "
                      f"{fmt.plural(len(now.processes), 'process', 'processes')}")
            line3.append(Part(
                Text(f"{counts}, {fmt.plural(len(now.recommendations), 'recommendation')}",
                     style=MUTED), 2, short=Text(counts, style=MUTED)))
        # One line each, what does not fit left out whole (fit); the edge cuts only words
        # (never wrapped: the status line is the third line at every width).
        width = self.content_size.width if self.size.width > 0 else 0
        self.update(Text("\n", no_wrap=True, overflow="ellipsis").join(
            [fit(line1, width), fit(line2, width), fit(line3, width)]))

    def update(self, content: VisualType = "", *, layout: bool = False) -> None:
        """Static.update without a layout: the header is 3 lines high and as wide as the
        screen whatever it says, and a layout re-renders every panel (at 500 processes, most
        of a refresh's cost). The same text again repaints nothing."""
        self.shown_for = None  # (show sets it again once it has called this)
        if isinstance(content, Text) and isinstance(self.content, Text) and \
                content == self.content:
            return
        super().update(content, layout=layout)
