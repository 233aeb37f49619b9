"""Workload programs for the simulated host: ordinary Python programs doing real work (reading,
decoding, writing checkpoints, serving requests) beside their simulated GPU kernels.

Run one with `python -m daemon.sim.workloads.NAME --gpu 0 [options]` and MLCOST_SIM_DIR set.
Each stops promptly on SIGTERM and removes its temporary files.
"""
