"""Memory that ``validation.select: best`` holds for the best step, before and after, side by side.

With ``select: best`` the validation callback keeps a copy of the best step's weights until training ends. It
used to copy the model's whole state; it now copies only what training moves (``callbacks.trained_weights``: a
LoRA policy's adapters). In the demo study that copy was held from step 0 on, and a better step briefly held two,
so the copy sat under the peak of ``make demo`` (validation at the last step). Two configurations on
``configs/demo.yaml``'s model and LoRA settings, each in its own process so that each one's resident memory is its
own:

- ``before``: a copy of the whole ``state_dict`` (what the callback kept before);
- ``after``: ``trained_weights`` (what it keeps now).

Reported: the bytes each copy holds and how much the process's resident memory rose when it was taken. Ends with
one JSON line.

    .venv/bin/python benchmarks/bench_select_best.py [--config configs/demo.yaml]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def one(config: str, how: str) -> dict:
    """The demo's LoRA policy in this process, then one copy of its weights taken ``how``; its figures."""
    import torch
    from peft import get_peft_model

    from haggler.engine.backends.embedded import resolve_model_path
    from haggler.training.callbacks import trained_weights
    from haggler.training.common import load_policy
    from haggler.training.config import load_config
    from haggler.training.lora import peft_config

    cfg = load_config(config)
    model, _ = load_policy(str(resolve_model_path(cfg.model)), cfg.dtype)
    model = get_peft_model(model, peft_config(cfg, model))
    with torch.no_grad():  # every weight resident first, as in training: the rise is the copy's alone
        sum(float(v.float().sum()) for v in model.state_dict().values())
    before = rss_bytes()
    if how == "before":
        copy = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    else:
        copy = trained_weights(model)
    rise = rss_bytes() - before
    held = sum(v.numel() * v.element_size() for v in copy.values())
    return {"tensors": len(copy), "held_mb": round(held / 1e6, 1), "rss_rise_mb": round(rise / 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/demo.yaml")
    parser.add_argument("--one", choices=["before", "after"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.config, args.one)))
        return
    figures = {}
    for name in ("before", "after"):
        done = subprocess.run([sys.executable, __file__, "--config", args.config, "--one", name],
                              capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"the {name} configuration failed:\n{done.stderr[-3000:]}")
        figures[name] = f = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name}: {f['tensors']} tensors, {f['held_mb']} MB held, resident memory +{f['rss_rise_mb']} MB")
    b, a = figures["before"], figures["after"]
    summary = {"benchmark": "select_best", "config": args.config, "before": b, "after": a,
               "held_ratio": round(a["held_mb"] / b["held_mb"], 4)}
    print(f"held for the best step: {b['held_mb']} MB -> {a['held_mb']} MB ({summary['held_ratio']}x)")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
