"""How long redaction takes: one very long argument, and a thousand typical command lines.
Prints figures.

Any user on a GPU host can start a process with an argument of up to 128 KiB (Linux's
MAX_ARG_STRLEN), and mlcostd redacts every GPU process's command line when it first sees it.
A pattern that backtracks makes that one line cost seconds (issue 20: 3.7 s on 20 KB, a 64 KiB
argument stopped every tick for 48 s). The long argument comes in the shapes that hurt a
regular expression most: one letter repeated (a URL scheme or a name that never ends), `a=`
repeated (an assignment inside an assignment), a base64 blob, a JSON document.

Target: <= 5 ms for the 128 KiB argument in every shape. An argument is cut at 4 KiB before it
is redacted (daemon.sources.redact.ARGUMENT_LIMIT); beside each figure, redact_text on the
whole text shows that the patterns themselves are linear (no cut there).
usage: python bench/redact.py [--kib 128] [--runs 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import time
from collections.abc import Callable

from daemon.sources.redact import redact_argv, redact_text

TYPICAL = [
    ["/opt/venv/bin/python3", "-m", "torch.distributed.run", "--nproc-per-node=8",
     "train.py", "--model", "llama-3-8b", "--max-tokens", "4096", "--lr", "3e-4",
     "--output-dir", "/data/ckpt/run-17", "--wandb-project", "pretrain"],
    ["python", "finetune.py", "--tokenizer", "t5-base", "--batch-size", "64",
     "--hf-token", "hf_abcdefghijklmnopqrstuvwxyz0123", "--data", "s3://bucket/train/"],
    ["vllm", "serve", "meta-llama/Llama-3-70B", "--port", "8000", "--tensor-parallel-size",
     "4", "--api-key", "sk-live-0123456789abcdefghijkl", "--max-model-len", "8192"],
    ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f",
     "/root/.local/share/jupyter/runtime/kernel-4f1c.json"],
    ["python", "eval.py", "--db", "postgresql://ml:hunter2@db.internal:5432/runs",
     "--key-size", "2048", "--seed", "1"],
    ["mysql", "-uroot", "-pS3cretPass", "-h", "10.0.0.4", "metrics"],
    ["python", "-c", "import time\nwhile True: time.sleep(1)"],
    ["torchrun", "--nnodes=2", "--rdzv-endpoint=10.0.0.1:29400", "pretrain.py",
     "--config", "configs/7b.yaml", "WANDB_API_KEY=0123456789abcdef0123456789abcdef"],
]


def long_arguments(size: int) -> dict[str, str]:
    blob = base64.b64encode(bytes(range(256)) * (size // 256 + 1)).decode()[:size]
    document = json.dumps({f"k{i}": "v" * 40 for i in range(size // 48)})[:size]
    return {
        "one letter": "a" * size,
        "a= repeated": "a=" * (size // 2),
        "base64 blob": blob,
        "JSON document": document,
        "scheme-like": "a+" * (size // 2),
        "path of a=": "/a=" * (size // 3),  # every `/` starts a word: each name is looked at
        "spaced words": "lr=3e-4 https://host/path?x=1 " * (size // 30),
        # a program's password options in a shell's -c text: every word is looked at
        "curl -u words": ("curl -fsSLubob:pw -u 'a b:c d' " * (size // 30))[:size],
        # hidden values that end in closing punctuation: what before them opened is looked at
        "closing marks": ("f(token=a, b) $(curl -u b:c); (x --api-key k) " * (size // 46))[:size],
        # authorization headers with no space after the name, a scheme each: every name and
        # scheme is looked at, and a YAML text's lines, each a name (code forms and line forms)
        "auth headers": ("Authorization:Bearer t " * (size // 23))[:size],
        "YAML lines": ("\n  - password: x\n    lr = 3e-4" * (size // 31))[:size],
    }


def timed(argv: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        redact_argv(argv)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kib", type=int, default=128, help="size of the long argument")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    size = args.kib * 1024
    worst = 0.0
    for shape, argument in long_arguments(size).items():
        try:
            seconds = timed(["python", "train.py", "--config-json", argument], args.runs)
        except RecursionError:  # how the redactor before issue 20 failed on `a=a=a=...`
            print(f"{args.kib} KiB argument, {shape:13}: RecursionError")
            worst = float("inf")
            continue
        worst = max(worst, seconds)
        # The same text through redact_text whole (a log message, a stored body): no cut, so
        # this is the patterns' own cost, linear in the length.
        start = time.perf_counter()
        redact_text(argument)
        whole = time.perf_counter() - start
        print(f"{args.kib} KiB argument, {shape:13}: {seconds * 1000:9.2f} ms "
              f"(redact_text on all of it: {whole * 1000:8.2f} ms)")
    lines = [TYPICAL[i % len(TYPICAL)] for i in range(1000)]
    batch = []
    for _ in range(args.runs):
        start = time.perf_counter()
        for argv in lines:
            redact_argv(argv)
        batch.append(time.perf_counter() - start)
    print(f"1,000 typical command lines     : {statistics.median(batch) * 1000:9.2f} ms "
          f"({statistics.median(batch) * 1e6 / 1000:.1f} us each)")
    print(f"worst long argument: {worst * 1000:.2f} ms (target <= 5 ms)")
    names(args.runs)


def per_call_us(fn: Callable[[], object], calls: int, runs: int) -> float:
    """The median over `runs` of `calls` calls of `fn`, in microseconds a call."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6 / calls


def names(runs: int) -> None:
    """The names redacted where they are read and on their way out of a store: a GPU's name
    and NVML's error (a tick with an error; a store's row), a process's owner (once per process;
    each stored row read), a meter's name, and the daemon's catalog (once per catalog loaded).
    `remembered`: the same text again (what a tick and a store's rows repeat); `new`: a text
    not seen before (the cache cleared each call)."""
    from daemon.sources import redact
    from daemon.sources.owners import decode_owner, shown_owner
    from pricing.catalog import Catalog

    gpu = "NVIDIA H100 80GB HBM3"
    error = "nvmlDeviceGetPowerUsage: Unknown Error (NVML error 999)"
    owner = {"pod_uid": "1a2b3c4d-1a2b-3c4d-1a2b-3c4d1a2b3c4d", "namespace": "ml-team",
             "pod": "trainer-7f9c-0", "container": "trainer",
             "container_id": "0123456789abcdef" * 4}
    stored_owner = json.dumps(owner, sort_keys=True, separators=(",", ":"))
    meter = "svc http://10.0.0.4:9100/metrics?token=0123456789abcdef requests_total"

    def new(fn: Callable[[str], object], text: str) -> Callable[[], object]:
        def call() -> object:
            redact._remembered_text.cache_clear()
            return fn(text)
        return call

    rows = [
        ("GPU name, remembered", lambda: redact.redact_field(gpu)),
        ("GPU name, new", new(redact.redact_field, gpu)),
        ("NVML error, remembered", lambda: redact.redact_field(error)),
        ("NVML error, new", new(redact.redact_field, error)),
        ("owner (5 values), remembered", lambda: shown_owner(owner)),
        ("stored owner decoded, remembered", lambda: decode_owner(stored_owner)),
        ("meter name (tagged), remembered", lambda: redact.redact_name(meter)),
        ("meter name (tagged), new", new(redact.redact_name, meter)),
    ]
    for label, fn in rows:
        print(f"{label:34}: {per_call_us(fn, 2000, runs):8.2f} us")
    catalog = Catalog.load()
    start = time.perf_counter()
    catalog.with_texts(redact.redact_field)
    once = time.perf_counter() - start
    print(f"bundled catalog ({len(catalog)} offers), with_texts : {once * 1000:8.2f} ms")
    many = Catalog([o for _ in range(80) for o in catalog.offers], checked=True)
    start = time.perf_counter()
    many.with_texts(redact.redact_field)
    print(f"{len(many)} offers, with_texts          : "
          f"{(time.perf_counter() - start) * 1000:8.2f} ms")


if __name__ == "__main__":
    main()
