"""The simulated GPU host: an NVML library answered from real workload processes.

`scenario` loads and starts a host (instance, GPUs, workloads, faults); `nvml` stands in for
libnvidia-ml so pynvml and every NVML client read that host; `device` is the client a workload
imports to hold simulated device memory and run simulated kernels. Nothing else is simulated.
"""
