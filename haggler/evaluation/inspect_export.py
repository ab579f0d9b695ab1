"""Results files as an Inspect AI evaluation log (``haggler export inspect RESULTS --out FILE.eval``), to
browse with ``inspect view`` and load with Inspect's dataframe functions (``inspect_ai.analysis.samples_df``).

One sample per negotiation (the latest record of each seller and cell): the transcript as chat messages
(the seller's turns as the assistant's, the buyer's as the user's, each with the action the engine read),
the seller score and the behaviour metrics as scores (numbers; a yes/no as 1 or 0; a record's ``behaviour``
and ``security`` figures too, where it has them, as ``behaviour_*`` and ``security_*``), and the scenario, the
buyer, the arm, the seller, the opener and the seed as metadata. An errored negotiation is a sample with
its error and no scores. Each sample's API usage is its ``model_usage``. Needs ``haggler[inspect]``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from haggler.evaluation.cost import agent_usage
from haggler.evaluation.results import Record, load_results

# Scores of a sample, in this order; yes/no metrics become 1 or 0 so that every score is a number.
SCORES = ("seller_score", "deal", "seller_utility", "buyer_utility", "seller_advantage", "pareto_optimal",
          "nash_distance", "individually_irrational", "turns", "invalid_seller", "invalid_buyer")
EXTRA_GROUPS = ("behaviour", "security")  # a record's groups of figures, where it has them
METADATA = ("scenario", "buyer", "arm", "seller", "opener", "seed", "cell_id", "ended_by", "walked_away_by",
            "agreement")


def score_values(r: Record) -> dict[str, float | int]:
    """The numbers a completed negotiation is scored with (none for an errored one)."""
    if r.ended_by == "error":
        return {}
    raw: dict[str, Any] = {k: getattr(r, k) for k in SCORES if hasattr(r, k)}
    raw["invalid_seller"] = (r.invalid_actions or {}).get("seller", 0)
    raw["invalid_buyer"] = (r.invalid_actions or {}).get("buyer", 0)
    out = {k: (int(v) if isinstance(v, bool) else v) for k in SCORES if (v := raw.get(k)) is not None}
    for group in EXTRA_GROUPS:  # figures a record may carry as a group: each number is a score of its own
        data = getattr(r, group, None)
        data = data.model_dump() if hasattr(data, "model_dump") else data
        for k, v in (data if isinstance(data, dict) else {}).items():
            if isinstance(v, (bool, int, float)):
                out[f"{group}_{k}"] = int(v) if isinstance(v, bool) else v
    return out


def sample_metadata(r: Record, arm: str) -> dict[str, Any]:
    values = {"scenario": r.scenario_id, "buyer": r.buyer, "arm": arm, "seller": r.seller, "opener": r.opener,
              "seed": r.seed, "cell_id": r.cell_id, "ended_by": r.ended_by, "walked_away_by": r.walked_away_by,
              "agreement": r.agreement}
    return {k: values[k] for k in METADATA}


def _action_line(action: dict[str, Any]) -> str:
    kind = action.get("type")
    if kind == "offer":
        return "[action: offer " + ", ".join(f"{k}: {v}" for k, v in (action.get("offer") or {}).items()) + "]"
    if kind == "invalid":
        return f"[action: invalid ({action.get('reason')})]"
    return f"[action: {str(kind).replace('_', ' ')}]"


def _messages(r: Record) -> list[Any]:
    # Lazy: inspect_ai is an optional extra (haggler[inspect]) and takes over a second to import.
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageUser

    out: list[Any] = [ChatMessageSystem(content=_input(r))]
    for t in r.transcript or []:
        content = f"{(t.get('text') or '').strip()}\n{_action_line(t.get('action') or {})}".strip()
        cls = ChatMessageAssistant if t.get("speaker") == "seller" else ChatMessageUser
        out.append(cls(content=content, source="generate") if cls is ChatMessageAssistant else cls(content=content))
    return out


def _input(r: Record) -> str:
    return (f"Scenario {r.scenario_id}: seller {r.seller} against buyer {r.buyer}; the {r.opener} opens "
            f"(cell {r.cell_id}, seed {r.seed}).")


def _usage(r: Record) -> dict[str, Any]:
    from inspect_ai.model import ModelUsage  # lazy: see _messages

    out: dict[str, Any] = {}
    for side in ("seller", "buyer"):
        agent = (r.agents or {}).get(side) or {}
        u = agent_usage(agent, r.settings or {})
        if u.calls:
            name = agent.get("reported_model") or agent.get("model") or agent.get("spec") or side
            out[str(name)] = ModelUsage(input_tokens=u.prompt_tokens, output_tokens=u.completion_tokens,
                                        total_tokens=u.tokens, input_tokens_cache_read=u.cached_tokens or None,
                                        total_cost=u.cost if u.priced else None)
    return out


def to_sample(r: Record, arm: str, sample_id: str) -> Any:
    from inspect_ai.log import EvalError, EvalSample  # lazy: see _messages
    from inspect_ai.scorer import Score

    error = EvalError(message=r.error or "error", traceback="", traceback_ansi="") if r.ended_by == "error" else None
    scores = {k: Score(value=v) for k, v in score_values(r).items()}
    return EvalSample(id=sample_id, epoch=1, input=_input(r), target="", messages=_messages(r),
                      scores=scores or None, metadata=sample_metadata(r, arm), model_usage=_usage(r), error=error)


def _results(samples: list[Any]) -> Any:
    from inspect_ai.log import EvalMetric, EvalResults, EvalScore  # lazy: see _messages

    values: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        for k, score in (s.scores or {}).items():
            values[k].append(float(score.value))
    scored = sum(1 for s in samples if s.scores)
    return EvalResults(total_samples=len(samples), completed_samples=scored, scores=[
        EvalScore(name=k, scorer=k, scored_samples=len(values[k]), unscored_samples=len(samples) - len(values[k]),
                  metrics={"mean": EvalMetric(name="mean", value=sum(values[k]) / len(values[k]))})
        for k in values])


def export_inspect(results: list[str | Path], out: str | Path, arm_of: dict[str, str] | None = None) -> int:
    """Write the log; the number of samples. ``arm_of``: seller spec -> arm name (else the spec)."""
    try:  # lazy: see _messages
        from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSpec, EvalStats, write_eval_log
    except ImportError:
        raise ValueError("exporting to Inspect needs Inspect AI: pip install 'haggler[inspect]'") from None

    records = load_results(results)
    sellers = sorted({r.seller for r in records})
    arm_of = arm_of or {}
    samples = [to_sample(r, arm_of.get(r.seller, r.seller), r.cell_id if len(sellers) == 1 else f"{r.seller}/{r.cell_id}")
               for r in records]
    total: dict[str, Any] = {}
    for s in samples:
        for model, usage in s.model_usage.items():
            total[model] = total[model] + usage if model in total else usage
    now = datetime.now(timezone.utc).isoformat()
    spec = EvalSpec(created=now, task="haggler/negotiation", model=sellers[0] if len(sellers) == 1 else "(several sellers)",
                    dataset=EvalDataset(name="grid", samples=len(samples)), config=EvalConfig(),
                    metadata={"results": [str(p) for p in results], "sellers": sellers,
                              "settings": json.loads(json.dumps(records[0].settings, default=str))})
    log = EvalLog(eval=spec, status="success", samples=samples, results=_results(samples),
                  stats=EvalStats(started_at=now, completed_at=now, model_usage=total))
    write_eval_log(log, str(out))
    return len(samples)
