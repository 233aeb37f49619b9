"""Ten short steps on the simulated GPU (daemon.sim.device), one 'step N/10' line each."""
from daemon.sim.device import Device

with Device(0) as gpu:
    gpu.alloc(2 << 30)
    for step in range(1, 11):
        gpu.kernel(0.15, sm=0.8)
        print(f"step {step}/10", flush=True)
