"""What the samples mean. Pure logic over samples and reader queries; it never writes the store.

busy.py (what a busy GPU is: the one [idle].utilization verdict), cost.py (host price, burn per
GPU and process, wasted $/h), ledger.py (dollars over time), meters.py (storage and unit cost),
idle.py (idle events), budgets.py, phases.py (a stack's phase, by the rules of stack_rules.py,
the lines of source_lines.py and the signals of host_signals.py), phase_balance.py (a process's
time per phase from its classified samples), balance.py (phase balance from the store),
derive.py (the per-process model), rules/ (the recommendation rules, one module per
family), book.py (recommendations over time), analyzer.py (all of it, tick by tick).
"""
