"""What the daemon reads: NVML (the GPUs), /proc (the processes), py-spy (stacks), and
the redaction of command lines at the source. Sources import neither store nor analysis."""
