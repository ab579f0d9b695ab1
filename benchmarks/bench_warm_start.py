"""Peak memory and time of the demo recipe's warm start (the peak stage of ``make demo``), before and after,
side by side.

The warm start fully fine-tunes the model (AdamW states for every weight) on the teacher's negotiations
through TRL's SFTTrainer; its activations and full-vocabulary logits, for a batch of 4 transcripts of about
650 tokens, made it the stage of ``make demo`` with the highest resident memory. Two configurations of
``configs/demo.yaml``'s warm start, each in its own process so that each one's peak is its own:

- ``before``: the batch of 4 in one pass, every activation kept, glibc's per-thread malloc arenas;
- ``after``: ``configs/demo.yaml`` as it is (gradient checkpointing, micro-batches with gradient
  accumulation), in one malloc arena as ``haggler`` runs.

Both must make the same model (the same objective, the same batches): the largest weight difference between the
two is reported next to the largest change either made to the base. Target: the after peak under 6 GB. Ends
with one JSON line.

    .venv/bin/python benchmarks/bench_warm_start.py [--config configs/demo.yaml]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The warm start's settings before this round's changes, laid over the config for the "before" run.
BEFORE = {"warm_start.gradient_checkpointing": False, "warm_start.micro_batch_size": None}


def one(config: str, out: str, overrides: dict) -> dict:
    """One configuration's warm start in this process; its figures."""
    from haggler.training.config import load_config
    from haggler.training.sft import run_warm_start

    cfg = load_config(config, {**overrides, "warm_start.output_dir": out})
    t = time.perf_counter()
    run_warm_start(cfg, force=True, log=lambda _: None)
    seconds = time.perf_counter() - t
    ws = cfg.warm_start
    return {"seconds": round(seconds, 1), "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 2),
            "batch_size": ws.batch_size, "micro_batch_size": ws.pass_size,
            "gradient_checkpointing": ws.gradient_checkpointing, "model_dir": out}


def weight_gaps(before: str, after: str, base: str) -> dict:
    """The largest difference between the two warm starts' weights, and the largest change from the base."""
    from safetensors.torch import load_file

    from haggler.training.common import load_policy

    a, b = load_file(str(Path(before) / "model.safetensors")), load_file(str(Path(after) / "model.safetensors"))
    start = load_policy(base, "float32")[0].state_dict()
    moved = max((a[k].float() - start[k].float()).abs().max().item() for k in a if k in start)
    gap = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    return {"max_weight_gap": gap, "max_weight_change": moved, "gap_vs_change": round(gap / moved, 4)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="configs/demo.yaml")
    p.add_argument("--child", choices=["before", "after"], help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        if args.child == "after":  # as `haggler train` and `haggler study run` run now
            from haggler.cli import one_malloc_arena

            one_malloc_arena()
        print(json.dumps(one(args.config, args.out, BEFORE if args.child == "before" else {})))
        return
    figures = {}
    with tempfile.TemporaryDirectory(prefix="bench-ws-") as tmp:
        for name in ("before", "after"):  # one after the other: the two never share the 2 cores
            done = subprocess.run([sys.executable, __file__, "--config", args.config, "--child", name,
                                   "--out", f"{tmp}/{name}"], capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"the {name} configuration failed:\n{done.stderr[-3000:]}")
            figures[name] = f = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{name}: warm start {f['seconds']} s, peak memory {f['peak_rss_gb']} GB (batch {f['batch_size']}"
                  f" in micro-batches of {f['micro_batch_size']}, gradient checkpointing {f['gradient_checkpointing']})")
        from haggler.engine.backends.embedded import resolve_model_path
        from haggler.training.config import load_config

        gaps = weight_gaps(f"{tmp}/before", f"{tmp}/after", str(resolve_model_path(load_config(args.config).model)))
    b, a = figures["before"], figures["after"]
    summary = {"benchmark": "warm_start", "config": args.config, "before": b, "after": a, **gaps,
               "peak_rss_gb_before": b["peak_rss_gb"], "peak_rss_gb_after": a["peak_rss_gb"],
               "time_ratio": round(a["seconds"] / b["seconds"], 2), "target_peak_rss_gb": 6.0}
    print(f"peak memory {b['peak_rss_gb']} GB -> {a['peak_rss_gb']} GB (target < 6 GB); time {summary['time_ratio']}x;"
          f" weights differ by at most {gaps['max_weight_gap']:.2e} (the warm start moved them up to"
          f" {gaps['max_weight_change']:.2e})")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
