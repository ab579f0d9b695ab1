"""The GPU path, checked end to end on one CUDA machine (the study runs there; CI never does).

Stages, each in a subprocess of its own with a time limit, so that one failure does not hide the rest:
  tests     the model-backed tests (token-level trajectories, lockstep equals alone, sampling seeds,
            GRPO rollouts) with CUDA visible: every local model they build lands on the GPU
  logprobs  8 negotiations of ``hf:default`` (bf16 on the GPU) against a scripted buyer: how far the
            sampler's log-probabilities are from a fresh forward pass of the same model, in bf16 and in
            fp32 (what TRL's importance-sampling correction has to absorb)
  train     ``haggler train`` from ``configs/gemma4.yaml`` (bf16, LoRA, gradient checkpointing, the
            rollout function on the accelerator's device) with the embedded model, 2 steps, no vLLM
  bench     ``benchmarks/bench_rollout.py`` on the GPU, 8 negotiations of 4 turns: lockstep against one at a time
  run       ``haggler run`` of an 8-scenario grid with an ``hf:default`` seller: results name the device
  gemma4    a Gemma 4 E2B-shaped model built from its config with random weights (35 layers, 20 of them
            KV-shared, hidden 1536, per-layer inputs 256, vocabulary 262,144; nothing downloaded), bf16 on
            the GPU: 16 negotiations of rollout (sampled tokens per second), two GRPO steps with LoRA r 32 on
            the decoder (seconds per step), peak GPU memory beside ``haggler memory 2.3B --lora``'s estimate

    python benchmarks/gpu_check.py [--out DIR] [--stages tests,logprobs,train,bench,run]

Writes DIR/gpu_check.json (one entry per stage: ok, seconds, figures, the tail of its output) after
every stage, and ends with that JSON on one line. All stages together take about 4 minutes on one H200
(most of it the tests' CPU-side TRL runs); each stage's limit keeps a hung one from eating the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = ("tests", "logprobs", "train", "bench", "run", "gemma4")
TEST_FILES = ["tests/test_llm.py", "tests/test_train.py", "tests/test_sft.py", "tests/test_warmstart.py"]


def logprob_gap() -> dict:
    """Sampler log-probabilities (lockstep, bf16, cached) against one fresh forward pass per negotiation."""
    import torch

    from haggler.agents.registry import AgentContext, make_agent
    from haggler.engine.backends.hf import HFModel
    from haggler.scenarios.generate import generate_scenarios
    from haggler.agents.format.prompts import PromptSettings
    from haggler.core.protocol import Negotiation, ProtocolConfig
    from haggler.engine.rollout import Game, play_lockstep

    model = HFModel("default")
    ctx = AgentContext(prompt=PromptSettings(), temperature=1.0, sample_seed=0)
    ctx.models["default"] = model
    games = []
    for i, s in enumerate(generate_scenarios(8, 77, max_turns=6)):
        neg = Negotiation(s, ProtocolConfig(opener="seller" if i % 2 == 0 else "buyer", max_invalid=6))
        games.append(Game(neg, {"seller": make_agent("hf:default", s, "seller", i, ctx),
                                "buyer": make_agent("scripted:conceder", s, "buyer", i, ctx)}))
    play_lockstep(games)
    fp32 = HFModel("default", dtype="float32")
    gaps: dict[str, list[float]] = {"same_dtype": [], "float32": []}
    for g in games:
        tr = g.agents["seller"].trajectory
        if tr is None:
            continue
        ids = torch.tensor([tr.prompt_ids + tr.completion_ids], device=model.device)
        n = len(tr.prompt_ids)
        for name, m in (("same_dtype", model), ("float32", fp32)):
            with torch.inference_mode():
                logits = m.model(input_ids=ids).logits[0, n - 1: -1].float()
            fresh = torch.log_softmax(logits, -1).gather(-1, ids[0, n:, None]).squeeze(-1).cpu().tolist()
            gaps[name] += [abs(a - b) for a, b, keep in zip(tr.logprobs, fresh, tr.env_mask) if keep]
    out = {"sampler": model.describe(), "sampled_tokens": len(gaps["same_dtype"])}
    for name, values in gaps.items():
        values.sort()
        out[f"vs_fresh_{name}"] = {"mean": round(sum(values) / max(len(values), 1), 5),
                                    "p99": round(values[int(0.99 * (len(values) - 1))], 5) if values else None,
                                    "max": round(values[-1], 5) if values else None}
    return out


# Gemma 4 E2B's text stack as reported for the hub checkpoint (FIELD-NOTES: third-party copies of its config)
E2B = {"hidden_size": 1536, "intermediate_size": 6144, "num_hidden_layers": 35, "num_kv_shared_layers": 20,
       "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256, "global_head_dim": 512,
       "hidden_size_per_layer_input": 256, "vocab_size": 262_144, "vocab_size_per_layer_input": 262_144,
       "sliding_window": 512, "final_logit_softcapping": 30.0, "max_position_embeddings": 32_768,
       "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 7}


# ``--small``: the same layout at toy width, to try the stage's code on a CPU before a GPU is lent
SMALL = {**E2B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 10, "num_kv_shared_layers": 4,
         "num_attention_heads": 2, "head_dim": 16, "global_head_dim": 32, "hidden_size_per_layer_input": 8,
         "sliding_window": 16, "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 2}


def gemma4_e2b(work: Path, small: bool = False) -> dict:
    """Rollout and update of a random Gemma 4 E2B-shaped model, bf16, on this machine's accelerator."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from haggler.engine.backends.embedded import embedded_model_dir, missing
    from haggler.engine.backends.hf import HFModel
    from haggler.training.config import load_config
    from haggler.training.grpo import build_trainer
    from haggler.training.memory import estimate

    # the real Gemma tokenizer where its package is installed, else SmolLM2's (ids fit either way)
    name = "gemma3-270m" if not missing("gemma3-270m") else "default"
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir(name))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    config = AutoConfig.for_model("gemma4_text", **(SMALL if small else E2B), pad_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device)
    params = sum(p.numel() for p in model.parameters())
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    policy = HFModel("e2b", model=model, tokenizer=tokenizer, device=device)
    from benchmarks.compat import play, play_figures  # one definition of "plays"

    start = time.perf_counter()
    games = play(policy, 16, 6)
    rollout_s = time.perf_counter() - start
    sampled = sum(sum(g.agents["seller"].trajectory.env_mask) for g in games if g.agents["seller"].trajectory)
    rollout_peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    cfg = load_config(data={
        "model": "default", "output_dir": str(work / "e2b"), "dtype": str(dtype).removeprefix("torch."),
        "scenarios": {"n": 8, "seed": 1001, "max_turns": 6}, "buyers": [{"spec": "scripted:conceder"}],
        "prompt": {"message_tokens": 0}, "lora": {"r": 32, "alpha": 64},
        "grpo": {"learning_rate": 5e-5, "max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 8,
                 "save_steps": 1000, "report_to": "none", "bf16": device == "cuda", "use_cpu": device == "cpu",
                 "gradient_checkpointing": True}})
    trainer = build_trainer(cfg, model, tokenizer)
    start = time.perf_counter()
    trainer.train()
    steps = [h for h in trainer.state.log_history if "step_time" in h]
    plan = estimate("2.3B", lora=True, seq_len=1024, micro_batch=8, lora_r=32)
    return {"device": device, "small": small, "tokenizer": name, "parameters": params, "play": play_figures(games),
            "rollout_s": round(rollout_s, 1), "sampled_tokens_per_s": round(sampled / rollout_s, 1),
            "rollout_peak_gib": rollout_peak, "grpo_s_per_step": [round(h["step_time"], 1) for h in steps],
            "train_s": round(time.perf_counter() - start, 1),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
            "haggler_memory_estimate_gib": round(plan.total_gib, 1), "estimate_settings": plan.settings}


def train_config(work: Path) -> Path:
    """configs/gemma4.yaml with the embedded model, scripted buyers only, 2 small steps and no vLLM."""
    import yaml

    cfg = yaml.safe_load((REPO / "configs" / "gemma4.yaml").read_text())
    cfg.update(model="default", output_dir=str(work / "train"), endpoints=None,
               buyers=[b for b in cfg["buyers"] if b["spec"].startswith("scripted:")],
               scenarios={"n": 8, "seed": 1001, "max_turns": 6},
               prompt={"cues": True, "message_tokens": 0})  # SmolLM2 needs the cues; Gemma 4 does not
    cfg["grpo"].update(max_steps=2, num_generations=4, per_device_train_batch_size=8, gradient_accumulation_steps=1,
                       use_vllm=False, save_steps=1000, report_to="none")
    for key in ("vllm_mode", "vllm_gpu_memory_utilization"):
        cfg["grpo"].pop(key, None)
    path = work / "gpu-train.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _last_json(text: str) -> dict | None:
    lines = [line for line in text.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def _run(cmd: list[str], env: dict | None = None, timeout: int = 150) -> tuple[bool, str, float]:
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
        ok, text = done.returncode == 0, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        ok, text = False, f"timed out after {timeout} s\n{(err.stdout or b'')[-4000:]!r}"
    return ok, text, round(time.perf_counter() - start, 1)


def stage(name: str, work: Path, small: bool = False) -> dict:
    py = sys.executable
    if name == "tests":
        ok, text, secs = _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TEST_FILES], timeout=240)
        summary = [line for line in text.splitlines() if " passed" in line or " failed" in line or " error" in line]
        return {"ok": ok, "seconds": secs, "summary": summary[-1] if summary else None, "tail": text[-3000:]}
    if name == "logprobs":
        ok, text, secs = _run([py, str(Path(__file__)), "--inner-logprobs"])
        figures = _last_json(text) if ok else None
        return {"ok": ok, "seconds": secs, "figures": figures, "tail": text[-2000:]}
    if name == "train":
        cfg = train_config(work)
        ok, text, secs = _run([py, "-m", "haggler.cli", "train", "--config", str(cfg)],
                              {"TRL_EXPERIMENTAL_SILENCE": "1"}, timeout=200)
        logs = [line for line in text.splitlines() if "'loss'" in line or '"loss"' in line or "reward" in line]
        return {"ok": ok, "seconds": secs, "log_lines": logs[-4:], "tail": text[-3000:],
                "saved": sorted(p.name for p in (work / "train").glob("*"))}
    if name == "bench":
        # short: a model that never ends its messages early (random weights) makes the alone pass slow
        ok, text, secs = _run([py, "benchmarks/bench_rollout.py", "--negotiations", "8", "--turns", "4"], timeout=200)
        figures = _last_json(text) if ok else None
        return {"ok": ok, "seconds": secs, "figures": figures, "tail": text[-2000:]}
    if name == "gemma4":
        ok, text, secs = _run([py, str(Path(__file__)), "--inner-gemma4", *(["--small"] if small else [])],
                              {"TRL_EXPERIMENTAL_SILENCE": "1"}, timeout=400)
        figures = _last_json(text) if ok else None
        return {"ok": ok, "seconds": secs, "figures": figures, "tail": text[-3000:]}
    if name == "run":
        scen, grid, res = work / "scenarios.jsonl", work / "grid.jsonl", work / "results.jsonl"
        cli = [py, "-m", "haggler.cli"]
        steps = [[*cli, "scenarios", "generate", "--n", "8", "--seed", "5", "--out", str(scen), "--max-turns", "6"],
                 [*cli, "grid", "--scenarios", str(scen), "--buyers", "scripted:conceder,scripted:boulware",
                  "--out", str(grid)],
                 [*cli, "run", "--grid", str(grid), "--scenarios", str(scen), "--seller", "hf:default",
                  "--out", str(res), "--no-progress"]]
        text, secs, ok = "", 0.0, True
        for cmd in steps:
            ok, out, s = _run(cmd)
            text, secs = text + out, secs + s
            if not ok:
                break
        from haggler.evaluation.results import read_records

        rows = read_records(res) if ok else []
        return {"ok": ok and bool(rows), "seconds": round(secs, 1), "negotiations": len(rows),
                "ended_by": sorted({r.ended_by for r in rows}, key=str),
                "seller_agent": (rows[0].agents or {}).get("seller") if rows else None, "tail": text[-2000:]}
    raise ValueError(name)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "runs/gpu-check"))
    p.add_argument("--stages", default=",".join(STAGES))
    p.add_argument("--inner-logprobs", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--inner-gemma4", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--small", action="store_true", help="the gemma4 stage at toy width (a CPU try of its code)")
    args = p.parse_args()
    if args.inner_logprobs:
        print(json.dumps(logprob_gap()))
        return
    if args.inner_gemma4:
        sys.path.insert(0, str(REPO))
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(gemma4_e2b(Path(tmp), args.small)))
        return
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"cuda": torch.cuda.is_available(), "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.stages.split(","):
            report[name] = stage(name, Path(tmp), args.small)
            print(name, "ok" if report[name]["ok"] else "FAILED", report[name]["seconds"], "s", flush=True)
            (out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: ({kk: vv for kk, vv in v.items() if kk != "tail"} if isinstance(v, dict) else v)
                      for k, v in report.items()}))


if __name__ == "__main__":
    main()
