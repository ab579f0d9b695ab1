"""Negotiations trained per minute and peak memory of the demo recipe's GRPO step, before and after, side by side.

Two configurations of ``configs/demo.yaml``'s GRPO step (the demo's warm-started model if it is there, else the
embedded model), each in its own process so that each one's peak resident memory is its own:

- ``before``: the recipe as it was (full fine-tuning in float32, sampling in float32, one micro-batch of two
  groups, observations that relay the buyer's words and state the table offer's score alone, glibc's
  per-thread malloc arenas, TRL's fused LM head projecting every position through the vocabulary);
- ``after``: ``configs/demo.yaml`` as it is now, in one malloc arena as ``haggler`` runs, the update projecting
  only the seller's sampled tokens (``training/loss_tokens.py``).

Each runs ``--steps`` optimizer steps through TRL; the mean of all but the first (which pays for warming up) is
reported, split into the rollout (the negotiations) and the update (scoring, loss, backward, optimizer): steps
differ (each meets other tasks, and negotiations end at different turns), so one step's time is noisy. Then, in
the same process, a bare forward and backward pass of the same model on the last micro-batch (prompt and completion tokens, the same attention mask) with a plain
masked log-likelihood loss: the update's tokens per second against it (a target of 0.7x). Targets of the
comparison: 2x negotiations per minute, and the after configuration's peak memory under 6 GB. Ends with one
JSON line.

    .venv/bin/python benchmarks/bench_train.py [--config configs/demo.yaml] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time

# The recipe's settings before this round's changes, laid over the config for the "before" run.
BEFORE = {"grpo.bf16": False, "grpo.per_device_train_batch_size": 8, "grpo.gradient_accumulation_steps": 1,
          "lora": None, "prompt.relay_messages": True, "prompt.compare_no_deal": False}


def one(config: str, steps: int, overrides: dict, loss_tokens_only: bool) -> dict:
    """One configuration's GRPO steps in this process; its figures."""
    import torch
    from transformers import TrainerCallback

    from haggler.training.common import load_policy
    from haggler.training.config import load_config
    from haggler.training.grpo import build_trainer, training_tasks

    out = tempfile.mkdtemp(prefix="bench-train-")
    # validation off: this times the GRPO step itself (validation's cost is its own negotiations)
    cfg = load_config(config, {**overrides, "grpo.max_steps": steps, "grpo.report_to": "none", "output_dir": out,
                               "grpo.save_steps": 10_000, "validation": None})
    demo_warm = load_config(config).warm_start_dir() if cfg.warm_start else None
    path = str(demo_warm) if demo_warm and (demo_warm / "config.json").is_file() else None
    if path is None:
        from haggler.engine.backends.hf import resolve_model_path

        path = resolve_model_path(cfg.model)
    model, tokenizer = load_policy(path, cfg.dtype)
    trainer = build_trainer(cfg, model, tokenizer, training_tasks(cfg), loss_tokens_only=loss_tokens_only)

    rollout_s: list[float] = []
    rollout = trainer.rollout_func

    def timed_rollout(prompts, tr):
        t = time.perf_counter()
        result = rollout(prompts, tr)
        rollout_s.append(time.perf_counter() - t)
        return result

    trainer.rollout_func = timed_rollout
    last: dict[str, torch.Tensor] = {}

    class Clock(TrainerCallback):
        """Optimizer steps' wall time."""

        def __init__(self):
            self.step_s: list[float] = []

        def on_step_begin(self, *a, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **kw):
            self.step_s.append(time.perf_counter() - self.t)

    clock = Clock()
    trainer.add_callback(clock)
    prepare = trainer._prepare_inputs  # a benchmark's probe of TRL's internals, not library code

    def keep_batch(inputs):
        result = prepare(inputs)
        last.update({k: v.detach().clone() for k, v in result.items() if torch.is_tensor(v)})
        return result

    trainer._prepare_inputs = keep_batch
    trainer.train()
    train_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2

    # all but the first step (when there are more); TRL calls the rollout once per optimizer step here
    counted = slice(1, None) if len(clock.step_s) > 1 else slice(None)
    step_s = sum(clock.step_s[counted]) / len(clock.step_s[counted])
    roll_s = sum(rollout_s[counted]) / len(rollout_s[counted])
    micro = cfg.grpo.gradient_accumulation_steps
    rows = cfg.grpo.per_device_train_batch_size * micro
    input_ids = torch.cat([last["prompt_ids"], last["completion_ids"]], dim=1)
    attention = torch.cat([last["prompt_mask"], last["completion_mask"]], dim=1)
    net = trainer.accelerator.unwrap_model(trainer.model)
    net.train()
    n_completion = last["completion_ids"].shape[1]

    def bare_pass() -> float:
        t = time.perf_counter()
        with trainer.accelerator.autocast():  # the same precision as the update
            logits = net(input_ids=input_ids, attention_mask=attention).logits[:, -n_completion - 1:-1]
        logps = torch.log_softmax(logits.float() / cfg.grpo.temperature, -1)
        picked = logps.gather(-1, last["completion_ids"].unsqueeze(-1)).squeeze(-1)
        loss = -(picked * last["completion_mask"]).sum() / last["completion_mask"].sum().clamp(min=1)
        loss.backward()
        net.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    bare_pass()  # warm-up
    bare_s = min(bare_pass() for _ in range(2))
    update_per_micro = (step_s - roll_s) / micro
    shutil.rmtree(out, ignore_errors=True)
    return {
        "model": path, "rollouts_per_step": rows, "micro_batches": micro, "bf16": bool(trainer.args.bf16),
        "padded_tokens_per_micro_batch": input_ids.numel(), "real_tokens_per_micro_batch": int(attention.sum()),
        "steps_counted": len(clock.step_s[counted]), "step_s": round(step_s, 2), "rollout_s": round(roll_s, 2),
        "update_s": round(step_s - roll_s, 2),
        "bare_forward_backward_s": round(bare_s, 2), "update_vs_bare": round(bare_s / update_per_micro, 2),
        "negotiations_per_min": round(rows / step_s * 60, 2),
        "peak_rss_gb": round(train_peak, 2),  # the training's (the bare pass after it is the benchmark's own)
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="configs/demo.yaml")
    p.add_argument("--steps", type=int, default=4,
                   help="GRPO steps per configuration; the mean of all but the first is reported")
    p.add_argument("--child", choices=["before", "after"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:  # one configuration, in its own process
        if args.child == "after":  # as `haggler train` runs now: one malloc arena for all threads
            from haggler.cli import one_malloc_arena

            one_malloc_arena()
        before = args.child == "before"
        print(json.dumps(one(args.config, args.steps, BEFORE if before else {}, loss_tokens_only=not before)))
        return
    figures = {}
    for name in ("before", "after"):  # one after the other: the two never share the 2 cores
        done = subprocess.run([sys.executable, __file__, "--config", args.config, "--steps", str(args.steps),
                               "--child", name], capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"the {name} configuration failed:\n{done.stderr[-3000:]}")
        figures[name] = json.loads(done.stdout.strip().splitlines()[-1])
        f = figures[name]
        print(f"{name}: a step of {f['rollouts_per_step']} negotiations {f['step_s']} s = rollout {f['rollout_s']} s"
              f" + update {f['update_s']} s ({f['micro_batches']} micro-batches, bf16 {f['bf16']});"
              f" {f['negotiations_per_min']} negotiations/min; peak memory {f['peak_rss_gb']} GB;"
              f" update {f['update_vs_bare']}x a bare forward+backward")
    b, a = figures["before"], figures["after"]
    summary = {"benchmark": "train_step", "config": args.config, "before": b, "after": a,
               "negotiations_per_min_ratio": round(a["negotiations_per_min"] / b["negotiations_per_min"], 2),
               "target_ratio": 2.0, "peak_rss_gb_before": b["peak_rss_gb"], "peak_rss_gb_after": a["peak_rss_gb"],
               "target_peak_rss_gb": 6.0}
    print(f"negotiations per minute: {summary['negotiations_per_min_ratio']}x (target >= 2x); peak memory"
          f" {b['peak_rss_gb']} GB -> {a['peak_rss_gb']} GB (target < 6 GB)")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
