"""The ``haggler`` command: parse the arguments, call one function, print.

Subcommands import their part of haggler when they run, so ``haggler --help`` and a config's validation
answer at once instead of after torch, transformers and NegMAS have loaded.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import yaml
from pydantic import ValidationError

from haggler.agents.format.prompts import ACTION_STYLES, SLOT_STYLES, PromptSettings
from haggler.agents.registry import SpecError
from haggler.core.config import ConfigError, error_items
from haggler.core.scenario import ScenarioError
from haggler.evaluation.grid import GridError
from haggler.evaluation.results import ResultsError
from haggler.evaluation.settings import RunSettings, default
from haggler.training.errors import TrainingStopped


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def cmd_generate(args: argparse.Namespace) -> int:
    from haggler.scenarios.generate import generate_scenarios
    from haggler.core.scenario import write_scenarios

    if args.n < 1:
        raise ValueError(f"--n must be at least 1, got {args.n}")
    if args.max_turns < 2:
        raise ValueError(f"--max-turns must be at least 2, got {args.max_turns}")
    scenarios = generate_scenarios(args.n, args.seed, max_turns=args.max_turns)
    write_scenarios(scenarios, args.out)
    print(f"wrote {len(scenarios)} scenarios to {args.out}")
    return 0


def cmd_import_genius(args: argparse.Namespace) -> int:
    from haggler.scenarios.genius import import_genius
    from haggler.core.scenario import iter_scenarios, write_scenarios

    scenario = import_genius(
        args.domain, args.seller, args.buyer, scenario_id=args.id, context=args.context, max_turns=args.max_turns
    )
    out = Path(args.out)
    kept = [s for s in iter_scenarios(out) if s.id != scenario.id] if args.append and out.exists() else []
    write_scenarios([*kept, scenario], out)
    n = len(scenario.issues)
    print(f"imported {scenario.id!r} ({n} issues, {scenario.n_outcomes} outcomes) into {out}")
    for side in ("seller", "buyer"):
        meta = scenario.source[side]
        if meta["discount_factor"] not in (None, 1.0):
            print(f"note: {side} discount factor {meta['discount_factor']} recorded, not applied (undiscounted)")
        if not meta["reservation_given"]:
            print(f"note: {side} profile gives no reservation value; using 0 as Genius does")
    return 0


def cmd_grid(args: argparse.Namespace) -> int:
    from haggler.agents.registry import check_spec
    from haggler.evaluation.grid import make_grid, write_grid
    from haggler.core.scenario import load_scenarios

    buyers = [check_spec(b) for b in _csv(args.buyers)]
    scenarios = load_scenarios(args.scenarios)
    cells = make_grid(list(scenarios), buyers, _csv(args.openers), repeats=args.repeats, seed=args.seed)
    write_grid(cells, args.out)
    print(f"wrote {len(cells)} cells ({len(scenarios)} scenarios x {len(buyers)} buyers"
          f" x {len(_csv(args.openers))} openers x {args.repeats} repeats) to {args.out}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from haggler.engine.backends.openai_api import DEFAULT_ENDPOINT, Endpoint, load_endpoints
    from haggler.evaluation.runner import run

    endpoints = load_endpoints(args.endpoints) if args.endpoints else {}
    if args.base_url:
        endpoints.setdefault(DEFAULT_ENDPOINT, Endpoint(base_url=args.base_url))
    given = {k: getattr(args, k) for k in ("cues", "slots", "actions", "message_tokens") if getattr(args, k) is not None}
    try:
        settings = RunSettings(no_deal=args.no_deal, max_invalid=args.max_invalid, temperature=args.temperature,
                               prompt=given, batch_size=args.batch_size, api_max_tokens=args.api_max_tokens,
                               sample_seed=None if args.unseeded else args.sample_seed)
    except ValidationError as err:  # named as the flags are spelt
        raise ValueError("; ".join(f"--{key.split('.')[-1].replace('_', '-')}: {msg}"
                                   for key, msg in error_items(err))) from None
    if args.dry_run:  # the estimate only: nothing is played, nothing is spent, nothing is written
        from haggler.evaluation.cost import estimate_run, render_estimate

        print(render_estimate(estimate_run(args.grid, args.scenarios, args.seller, args.out, settings.api_max_tokens,
                                           endpoints)))
        return 0
    report = run(args.grid, args.scenarios, args.seller, args.out, settings=settings, progress=not args.no_progress,
                 endpoints=endpoints)
    print(f"{report.played} played, {report.skipped} already done, {report.errors} errors; results in {args.out}")
    return 1 if report.errors else 0


def _train_config(args: argparse.Namespace) -> object:
    """The config with its overrides, validated, and the model checked: before anything heavy loads."""
    from haggler.agents.registry import check_model_source
    from haggler.training.config import load_config

    overrides: dict[str, object] = {}
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. grpo.beta=0.04")
        overrides[key.strip()] = yaml.safe_load(value)
    for flag, key in (("learning_rate", "grpo.learning_rate"), ("max_steps", "grpo.max_steps"),
                      ("output_dir", "output_dir")):
        if getattr(args, flag, None) is not None:
            overrides[key] = getattr(args, flag)
    cfg = load_config(args.config, overrides)
    try:
        check_model_source(cfg.model)
    except SpecError as err:
        raise ConfigError(f"{args.config}: model: {err}") from None
    return cfg


def cmd_train(args: argparse.Namespace) -> int:
    cfg = _train_config(args)
    from haggler.training.recipe import run_training

    run_training(cfg, resume=args.resume)
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    cfg = _train_config(args)
    if cfg.warm_start is None:
        raise ConfigError(f"{args.config}: warm_start: this config names no warm start")
    from haggler.training.sft import run_warm_start

    out = run_warm_start(cfg, force=args.force)
    if args.measure:
        from haggler.evaluation.valid_actions import valid_action_rate

        settings = cfg.prompt  # its explicit fields over each model's card: both play in the training format
        for label, spec in (("before", f"hf:{cfg.model}"), ("after", f"hf:{out}")):
            figures = valid_action_rate(spec, args.measure, cfg.warm_start.max_turns, settings,
                                        cfg.grpo.temperature)
            print(f"valid actions {label} the warm start: {figures['valid_rate']:.1%} of {figures['turns']} turns")
            print(json.dumps({"measure": f"valid_actions_{label}", **figures}))
    return 0


def cmd_memory(args: argparse.Namespace) -> int:
    from haggler.training.memory import alternatives, estimate, render

    asked = dict(model=args.model, lora=args.lora, gpu_memory_gb=args.gpu_memory, seq_len=args.seq_len,
                 micro_batch=args.micro_batch, gpus=args.gpus, vllm_share=args.vllm_share,
                 optimizer_bits=args.optimizer_bits, offload=args.offload)
    plan = estimate(**asked)
    print(render(plan))
    if not plan.fits:
        found = alternatives(asked)
        print("would fit with:" if found else "nothing tried fits; shorten --seq-len or add GPUs")
        for alt in found:
            print(f"  {alt.settings}: {alt.total_gib:.1f} GiB")
    return 0 if plan.fits else 1


def cmd_study(args: argparse.Namespace) -> int:
    from haggler.study.config import load_study

    cfg = load_study(args.config)  # validated before anything heavy loads
    from haggler.study.config import plan_arms
    from haggler.study.run import run_study

    if args.action == "plan":
        arms, trainings = plan_arms(cfg)
        for a in arms:
            extra = f" lr {a.learning_rate:g} seed {a.seed}" if a.kind == "rl" else ""
            print(f"{a.kind:<9} {a.name:<28} {a.spec}{extra}")
        print(f"{len(trainings)} training run(s); results in {cfg.output_dir}")
        from haggler.study.estimate import estimate_study
        from haggler.evaluation.cost import render_estimate

        print(render_estimate(estimate_study(cfg)))
        return 0
    report = run_study(cfg, study_path=args.config, progress=not args.no_progress)
    print(f"report: {report}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from haggler.study.report import build_report

    study = None
    if args.study:
        from haggler.study.config import load_study

        study = load_study(args.study)
    build_report(args.results, args.out, study=study, study_path=args.study)
    print(f"report written to {args.out} (report.html, report.md, summary.json, plots/, tables/)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from haggler.evaluation.inspect_export import export_inspect

    arm_of = {a["spec"]: a["name"] for a in json.loads(Path(args.arms).read_text())} if args.arms else None
    n = export_inspect(args.results, args.out, arm_of)
    print(f"wrote {n} samples to {args.out} (inspect view --log-dir {Path(args.out).parent})")
    return 0


def cmd_summary(args: argparse.Namespace) -> int:
    from haggler.evaluation.results import load_results
    from haggler.evaluation.summary import render, summarize

    render(summarize(load_results(args.results)))
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    from haggler.core.scenario import load_scenarios
    from haggler.evaluation.interactive import play_against
    from haggler.scenarios.generate import generate_scenarios

    if args.scenarios:
        table = load_scenarios(args.scenarios)
        if args.scenario and args.scenario not in table:
            raise ValueError(f"no scenario {args.scenario!r} in {args.scenarios}")
        scenario = table[args.scenario] if args.scenario else next(iter(table.values()))
    else:
        scenario = generate_scenarios(1, args.seed)[0]
    play_against(args.seller, scenario, args.opener, args.seed, args.temperature)
    return 0


def cmd_tournament(args: argparse.Namespace) -> int:
    from haggler.evaluation.tournament import scripted_tournament

    scripted_tournament(Path(args.out), n_scenarios=args.n)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="haggler", description="Negotiation scenarios, agents, runs and results.")
    sub = p.add_subparsers(dest="command", required=True)

    sc = sub.add_parser("scenarios", help="generate or import scenarios").add_subparsers(dest="action", required=True)
    g = sc.add_parser("generate", help="write N seeded scenarios as JSON lines")
    g.add_argument("--n", type=int, required=True)
    g.add_argument("--seed", type=int, required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--max-turns", type=int, default=10, help="turns allowed per negotiation, both sides counted")
    g.set_defaults(func=cmd_generate)

    gi = sc.add_parser("import-genius", help="import a Genius domain and two profiles as one scenario")
    gi.add_argument("domain")
    gi.add_argument("--seller", required=True, help="the seller's preference profile (XML)")
    gi.add_argument("--buyer", required=True, help="the buyer's preference profile (XML)")
    gi.add_argument("--out", required=True)
    gi.add_argument("--id", default=None, help="scenario id (default: from the file names)")
    gi.add_argument("--context", default=None, help="the product in plain words")
    gi.add_argument("--max-turns", type=int, default=20)
    gi.add_argument("--append", action="store_true", help="add to OUT instead of replacing it")
    gi.set_defaults(func=cmd_import_genius)

    gr = sub.add_parser("grid", help="write the evaluation grid: one line per negotiation cell")
    gr.add_argument("--scenarios", required=True)
    gr.add_argument("--buyers", required=True, help="comma-separated buyer specs")
    gr.add_argument("--openers", default="seller,buyer")
    gr.add_argument("--repeats", type=int, default=1)
    gr.add_argument("--seed", type=int, default=0)
    gr.add_argument("--out", required=True)
    gr.set_defaults(func=cmd_grid)

    r = sub.add_parser("run", help="play every cell of a grid with one seller; resumable")
    r.add_argument("--grid", required=True)
    r.add_argument("--scenarios", required=True)
    r.add_argument("--seller", required=True)
    r.add_argument("--out", required=True)
    # Defaults come from RunSettings (one declaration). Prompt flags default to "not given": a model's card
    # decides its format, and only what is given here overrides it.
    r.add_argument("--no-deal", choices=("reservation", "zero"), default=default("no_deal"),
                   help="the seller's score without a deal (default: %(default)s)")
    r.add_argument("--max-invalid", type=int, default=default("max_invalid"),
                   help="invalid actions before a side is taken to walk away (default: %(default)s)")
    r.add_argument("--temperature", type=float, default=default("temperature"),
                   help="sampling temperature of language-model agents (default: %(default)s)")
    r.add_argument("--no-cues", dest="cues", action="store_const", const=False, default=None,
                   help="language-model agents write the whole reply (default: the environment cues each slot)")
    r.add_argument("--slots", choices=SLOT_STYLES, default=None,
                   help=f"how a cued issue slot presents its options (default: the model card's, else {PromptSettings().slots})")
    r.add_argument("--actions", choices=ACTION_STYLES, default=None,
                   help=f"how the cued action slot presents offer / accept / walk away (default: the model card's, else "
                        f"{PromptSettings().actions})")
    r.add_argument("--message-tokens", type=int, default=None,
                   help=f"budget of the cued free-text message, 0: no message (default: the model card's, else "
                        f"{PromptSettings().message_tokens})")
    r.add_argument("--batch-size", type=int, default=default("batch_size"),
                   help="negotiations in play at once (default: %(default)s)")
    r.add_argument("--sample-seed", type=int, default=default("sample_seed"),
                   help="each language-model agent samples from its own stream seeded by this, its cell's seed and "
                        "its side, so reruns give the same negotiations (default: %(default)s)")
    r.add_argument("--unseeded", action="store_true",
                   help="let language-model agents share one unseeded stream (reruns differ)")
    r.add_argument("--base-url", default=None,
                   help="the default OpenAI-compatible endpoint (else OPENAI_BASE_URL); its key: OPENAI_API_KEY")
    r.add_argument("--api-max-tokens", type=int, default=default("api_max_tokens"),
                   help="reply budget of openai: agents (default: %(default)s)")
    r.add_argument("--endpoints", default=None,
                   help="a YAML table of named endpoints for specs like openai:MODEL@NAME")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--dry-run", action="store_true",
                   help="estimate the API calls, tokens and cost of the cells not yet done, and play nothing")
    r.set_defaults(func=cmd_run)

    def train_flags(q: argparse.ArgumentParser) -> None:
        q.add_argument("--config", required=True, help="a training config (YAML), e.g. configs/demo.yaml")
        q.add_argument("--learning-rate", type=float, default=None)
        q.add_argument("--max-steps", type=int, default=None)
        q.add_argument("--output-dir", default=None)
        q.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override any config key, e.g. --set grpo.beta=0.04 (repeatable)")

    t = sub.add_parser("train", help="GRPO-train a seller (warm start first when the config names one)")
    train_flags(t)
    t.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in the output dir")
    t.set_defaults(func=cmd_train)

    sf = sub.add_parser("sft", help="only the imitation warm start of a training config")
    train_flags(sf)
    sf.add_argument("--force", action="store_true", help="redo it even if its output is there")
    sf.add_argument("--measure", type=int, default=0, metavar="N",
                    help="measure the valid-action rate before and after on N negotiations")
    sf.set_defaults(func=cmd_sft)

    pn = sub.add_parser("memory", help="estimate a training run's GPU memory and whether it fits")
    pn.add_argument("--model", required=True, help="a Hugging Face id, a model folder, or a size such as 4.5B")
    pn.add_argument("--lora", action="store_true")
    pn.add_argument("--gpu-memory", type=float, default=80.0, help="GiB per GPU")
    pn.add_argument("--gpus", type=int, default=1)
    pn.add_argument("--seq-len", type=int, default=4096, help="tokens per training sequence")
    pn.add_argument("--micro-batch", type=int, default=1, help="sequences per forward/backward pass")
    pn.add_argument("--vllm-share", type=float, default=0.0,
                    help="share of GPU memory given to a colocated vLLM (0: a separate server or none)")
    pn.add_argument("--optimizer-bits", type=int, choices=(32, 8), default=32, help="AdamW state precision")
    pn.add_argument("--offload", action="store_true", help="optimizer states offloaded to CPU (ZeRO-3 offload)")
    pn.set_defaults(func=cmd_memory)

    st = sub.add_parser("study", help="the whole study: train every RL arm, evaluate every arm, report")
    st.add_argument("action", choices=("run", "plan"),
                    help="run it (resumable), or list its arms and estimate its API calls, tokens and cost")
    st.add_argument("config", help="a study config, e.g. configs/demo-study.yaml")
    st.add_argument("--no-progress", action="store_true")
    st.set_defaults(func=cmd_study)

    rp = sub.add_parser("report", help="statistics, plots, tables and an HTML report from results files")
    rp.add_argument("results", nargs="+")
    rp.add_argument("--out", required=True)
    rp.add_argument("--study", default=None, help="the study config: arms, bases, sizes, rates, seeds")
    rp.set_defaults(func=cmd_report)

    ex = sub.add_parser("export", help="results in another tool's format").add_subparsers(dest="format", required=True)
    ei = ex.add_parser("inspect", help="an Inspect AI log (.eval): one sample per negotiation (haggler[inspect])")
    ei.add_argument("results", nargs="+")
    ei.add_argument("--out", required=True, help="the log file, e.g. runs/x.eval")
    ei.add_argument("--arms", default=None, help="a study's arms.json, to name each seller's arm")
    ei.set_defaults(func=cmd_export)

    s = sub.add_parser("summary", help="a table per seller x buyer")
    s.add_argument("results", nargs="+")
    s.set_defaults(func=cmd_summary)

    pl = sub.add_parser("play", help="play the buyer yourself, in the terminal, against any seller")
    pl.add_argument("--seller", required=True)
    pl.add_argument("--scenarios", default=None, help="a scenario file (default: one generated scenario)")
    pl.add_argument("--scenario", default=None, help="a scenario id in --scenarios")
    pl.add_argument("--seed", type=int, default=0)
    pl.add_argument("--opener", choices=("seller", "buyer"), default="seller")
    pl.add_argument("--temperature", type=float, default=1.0)
    pl.set_defaults(func=cmd_play)

    d = sub.add_parser("tournament", help="every scripted seller against scripted buyers, with a summary table")
    d.add_argument("--out", default="runs/tournament")
    d.add_argument("--n", type=int, default=24, help="scenarios")
    d.set_defaults(func=cmd_tournament)
    return p


def one_malloc_arena() -> None:
    """Make every thread allocate from one glibc heap ("arena"). By default each thread that allocates gets its
    own and keeps what it frees there for itself: the local sampler's worker thread and the trainer's thread
    then each hold their own high-water mark. Measured on a demo GRPO run (validation, then a step): a peak of
    6.8 GB with per-thread arenas, 5.4 GB with one. Must run before the first thread starts; a no-op off glibc."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # -8: M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    one_malloc_arena()
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ScenarioError, GridError, ResultsError, SpecError, ConfigError, ValueError, TrainingStopped) as err:
        print(f"haggler: error: {err}", file=sys.stderr)
        # 1: a run that stopped on its own evidence (every rollout errored); 2: bad input
        return 1 if isinstance(err, TrainingStopped) else 2


if __name__ == "__main__":
    sys.exit(main())
