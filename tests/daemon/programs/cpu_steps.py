"""A training loop that fell back to the CPU: 'step N/30' lines, no GPU touched."""
import time

for step in range(1, 31):
    time.sleep(0.1)
    print(f"step {step}/30", flush=True)
