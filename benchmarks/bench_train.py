"""One GRPO step of the demo recipe, split into rollout and update, against a bare forward and backward pass.

Runs ``configs/demo.yaml``'s GRPO step (the embedded model, or the demo's warm-started model if it is
there) through TRL, timing the rollout function, the rest of TRL's input preparation (scoring,
advantages) and the update (the loss's forward, backward and the optimizer step). Then, in the same run,
a bare forward and backward pass of the same model on the same padded batch (prompt and completion
tokens, the same attention mask), with a plain masked log-likelihood loss. Target: the update's tokens
per second at least 0.7x the bare pass's. Ends with one JSON line.

    .venv/bin/python benchmarks/bench_train.py [--config configs/demo.yaml] [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="configs/demo.yaml")
    p.add_argument("--steps", type=int, default=2, help="GRPO steps; the last one is reported")
    args = p.parse_args()

    from transformers import TrainerCallback

    from haggler.training.common import load_policy
    from haggler.training.grpo import build_trainer, training_tasks
    from haggler.training.config import load_config

    out = tempfile.mkdtemp(prefix="bench-train-")
    # validation off: this times the GRPO step itself (validation's cost is its own negotiations)
    cfg = load_config(args.config, {"grpo.max_steps": args.steps, "grpo.report_to": "none", "output_dir": out,
                                    "grpo.save_steps": 10_000, "validation": None})
    base_cfg = load_config(args.config)
    demo_warm = base_cfg.warm_start_dir() if base_cfg.warm_start else None
    path = str(demo_warm) if demo_warm and (demo_warm / "config.json").is_file() else None  # noqa: SIM108
    if path is None:
        from haggler.engine.backends.hf import resolve_model_path

        path = resolve_model_path(cfg.model)
    model, tokenizer = load_policy(path, cfg.dtype)
    tasks = training_tasks(cfg)
    trainer = build_trainer(cfg, model, tokenizer, tasks)

    timing: dict[str, list[float]] = {"rollout": [], "prepare": [], "step": []}
    batches: list[dict[str, torch.Tensor]] = []
    rollout = trainer.rollout_func

    def timed_rollout(prompts, tr):
        t = time.perf_counter()
        result = rollout(prompts, tr)
        timing["rollout"].append(time.perf_counter() - t)
        return result

    trainer.rollout_func = timed_rollout
    prepare = trainer._prepare_inputs

    def timed_prepare(inputs):
        t = time.perf_counter()
        result = prepare(inputs)
        timing["prepare"].append(time.perf_counter() - t)
        batches.append({k: v.detach().clone() for k, v in result.items() if torch.is_tensor(v)})
        return result

    trainer._prepare_inputs = timed_prepare

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, *a, **kw):
            timing["step"].append(time.perf_counter() - self.t)

    trainer.add_callback(StepClock())
    trainer.train()

    batch = batches[-1]
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    padded_tokens = input_ids.numel()
    real_tokens = int(attention.sum())
    rollout_s, prepare_s, step_s = timing["rollout"][-1], timing["prepare"][-1], timing["step"][-1]
    update_s = step_s - prepare_s

    net = trainer.accelerator.unwrap_model(trainer.model)
    net.train()
    n_completion = batch["completion_ids"].shape[1]

    def bare_pass() -> float:
        t = time.perf_counter()
        logits = net(input_ids=input_ids, attention_mask=attention).logits[:, -n_completion - 1:-1]
        logps = torch.log_softmax(logits.float() / cfg.grpo.temperature, -1)
        picked = logps.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
        mask = batch["completion_mask"] * batch.get("tool_mask", torch.ones_like(batch["completion_mask"]))
        loss = -(picked * mask).sum() / mask.sum().clamp(min=1)
        loss.backward()
        net.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    bare_pass()  # warm-up
    bare_s = min(bare_pass() for _ in range(2))
    figures = {
        "benchmark": "train_step", "model": path, "rollouts_per_step": len(batch["completion_ids"]),
        "padded_tokens": padded_tokens, "real_tokens": real_tokens,
        "step_s": round(step_s, 2), "rollout_s": round(rollout_s, 2), "scoring_s": round(prepare_s - rollout_s, 2),
        "update_s": round(update_s, 2), "bare_forward_backward_s": round(bare_s, 2),
        "update_tokens_per_s": round(padded_tokens / update_s, 1),
        "bare_tokens_per_s": round(padded_tokens / bare_s, 1),
        "ratio": round(bare_s / update_s, 2), "target_ratio": 0.7,
        # end to end (rollout, scoring, update) and the process's peak resident memory so far
        "negotiations_per_min": round(len(batch["completion_ids"]) / step_s * 60, 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2, 2),
    }
    print(f"one GRPO step: {step_s:.1f} s = rollout {rollout_s:.1f} s + scoring {prepare_s - rollout_s:.1f} s"
          f" + update {update_s:.1f} s")
    print(f"update {figures['update_tokens_per_s']} tokens/s vs bare forward+backward {figures['bare_tokens_per_s']}"
          f" tokens/s on the same {padded_tokens} padded tokens: {figures['ratio']}x (target >= 0.7x)")
    print(f"{figures['negotiations_per_min']} negotiations trained per minute; peak memory {figures['peak_rss_gb']} GB")
    print(json.dumps(figures))
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
