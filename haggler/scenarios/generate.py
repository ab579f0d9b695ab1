"""Seeded generation of seller/buyer scenarios from a catalogue of products.

Every scenario has a price issue, mixes distributive issues (opposed preferences) with
integrative ones (the sides weigh them differently, or even agree), has a zone of agreement,
and is not trivial: neither side's best outcome is acceptable to the other. The same arguments
give byte-identical output: one ``numpy`` generator per scenario, seeded from (seed, index).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from haggler.core.analysis import analyze
from haggler.core.scenario import Issue, Preferences, Scenario

MAX_OUTCOMES = 10_000

# How the two sides value an issue's options, listed in order:
#   "opposed": the seller likes the first option best, the buyer the last (distributive);
#   "shared":  both like the last option best (compatible, nothing to fight over);
#   "taste":   each side has its own idiosyncratic ranking (integrative);
#   "price":   ascending prices, so the seller likes the last option best and the buyer the first.
IssueSpec = tuple[str, tuple[str, ...], str]


@dataclass(frozen=True)
class Product:
    kind: str
    contexts: tuple[str, ...]
    price_range: tuple[float, float]
    price_unit: str
    issues: tuple[IssueSpec, ...]


CATALOGUE: tuple[Product, ...] = (
    Product(
        "used car",
        ("a used {year} hatchback with {km},000 km", "a used {year} estate car, one owner", "a used {year} city car"),
        (6_000, 16_000), "",
        (
            ("warranty", ("none", "3 months", "6 months", "12 months"), "opposed"),
            ("winter tyres", ("not included", "used set", "new set"), "opposed"),
            ("handover", ("this week", "next week", "in two weeks"), "taste"),
            ("service before sale", ("as is", "oil change", "full service"), "opposed"),
            ("payment", ("cash", "bank transfer", "financing"), "taste"),
            ("registration paperwork", ("buyer does it", "seller does it"), "shared"),
        ),
    ),
    Product(
        "office chairs",
        ("a bulk order of {n} office chairs", "{n} ergonomic office chairs for a new branch"),
        (18_000, 60_000), "",
        (
            ("delivery", ("6 weeks", "4 weeks", "2 weeks", "1 week"), "opposed"),
            ("assembly", ("none", "on request", "included"), "opposed"),
            ("colour", ("black", "grey", "blue", "green", "red"), "taste"),
            ("payment terms", ("upfront", "net 30", "net 60", "net 90"), "opposed"),
            ("warranty", ("1 year", "3 years", "5 years"), "opposed"),
            ("packaging", ("standard", "recycled", "minimal"), "shared"),
        ),
    ),
    Product(
        "laptop",
        ("a refurbished business laptop", "a {year} gaming laptop, barely used", "a batch of {n} student laptops"),
        (600, 2_400), "",
        (
            ("memory", ("8 GB", "16 GB", "32 GB"), "opposed"),
            ("storage", ("256 GB", "512 GB", "1 TB", "2 TB"), "opposed"),
            ("warranty", ("none", "6 months", "1 year", "2 years"), "opposed"),
            ("bag", ("no bag", "sleeve", "backpack"), "taste"),
            ("shipping", ("pickup", "standard", "express"), "taste"),
            ("keyboard layout", ("US", "UK", "German"), "taste"),
        ),
    ),
    Product(
        "web design contract",
        ("a website redesign for a {shop}", "an online shop for a {shop}"),
        (3_000, 20_000), "",
        (
            ("deadline", ("12 weeks", "8 weeks", "6 weeks", "4 weeks"), "opposed"),
            ("revisions", ("1 round", "2 rounds", "3 rounds", "unlimited"), "opposed"),
            ("support", ("none", "3 months", "6 months", "12 months"), "opposed"),
            ("framework", ("WordPress", "Shopify", "custom"), "taste"),
            ("payment schedule", ("all upfront", "half upfront", "on milestones", "on delivery"), "opposed"),
            ("portfolio rights", ("no", "yes"), "taste"),
        ),
    ),
    Product(
        "catering order",
        ("catering for a wedding of {n} guests", "a lunch buffet for a {n}-person conference"),
        (2_000, 15_000), "",
        (
            ("menu", ("set menu", "two choices", "buffet", "a la carte"), "taste"),
            ("staff", ("none", "2 waiters", "4 waiters", "6 waiters"), "opposed"),
            ("drinks", ("not included", "soft drinks", "wine and beer", "open bar"), "opposed"),
            ("cancellation", ("no refund", "50% refund", "full refund"), "opposed"),
            ("dessert", ("cake", "fruit", "ice cream"), "taste"),
            ("leftovers", ("discarded", "packed for the client"), "shared"),
        ),
    ),
    Product(
        "bicycle",
        ("a second-hand road bike", "a {year} e-bike in good condition", "a cargo bike for a family"),
        (300, 4_000), "",
        (
            ("accessories", ("none", "lock", "lock and lights", "full kit"), "opposed"),
            ("tune-up", ("as is", "basic", "full"), "opposed"),
            ("frame size", ("S", "M", "L"), "taste"),
            ("pickup", ("buyer collects", "seller delivers"), "opposed"),
            ("test ride", ("none", "15 minutes", "a day"), "taste"),
        ),
    ),
    Product(
        "printing job",
        ("{n} printed copies of a company brochure", "a print run of {n} event posters"),
        (800, 9_000), "",
        (
            ("paper", ("80 gsm", "115 gsm", "150 gsm", "200 gsm"), "opposed"),
            ("turnaround", ("10 days", "5 days", "3 days", "next day"), "opposed"),
            ("proofs", ("digital only", "one printed proof", "two printed proofs"), "opposed"),
            ("finish", ("matte", "gloss", "silk"), "taste"),
            ("delivery", ("collect", "one address", "three addresses"), "opposed"),
            ("file check", ("client's responsibility", "printer checks files"), "shared"),
        ),
    ),
    Product(
        "software licence",
        ("a {n}-seat licence of a project-management tool", "an analytics platform licence for a {shop}"),
        (5_000, 80_000), "",
        (
            ("term", ("1 year", "2 years", "3 years"), "taste"),
            ("support level", ("email", "business hours", "24/7"), "opposed"),
            ("onboarding", ("docs only", "2 sessions", "5 sessions", "dedicated manager"), "opposed"),
            ("payment", ("annual upfront", "quarterly", "monthly"), "opposed"),
            ("price lock", ("none", "1 renewal", "2 renewals"), "opposed"),
            ("case study", ("no", "yes"), "taste"),
        ),
    ),
    Product(
        "coffee beans",
        ("a wholesale order of {n} kg of coffee beans for a {shop}", "a monthly coffee supply for a {shop}"),
        (2_500, 25_000), "",
        (
            ("origin", ("Brazil", "Colombia", "Ethiopia", "Guatemala", "Kenya"), "taste"),
            ("roast", ("light", "medium", "dark"), "taste"),
            ("delivery", ("monthly", "fortnightly", "weekly"), "opposed"),
            ("contract length", ("3 months", "6 months", "12 months"), "taste"),
            ("grinder loan", ("no", "yes"), "opposed"),
            ("payment terms", ("upfront", "net 15", "net 30", "net 60"), "opposed"),
        ),
    ),
    Product(
        "solar installation",
        ("a rooftop solar installation for a family house", "solar panels for a {shop}'s roof"),
        (7_000, 30_000), "",
        (
            ("panels", ("standard", "premium", "high-efficiency"), "opposed"),
            ("battery", ("none", "5 kWh", "10 kWh", "15 kWh"), "opposed"),
            ("start date", ("in 3 months", "in 2 months", "next month", "within 2 weeks"), "opposed"),
            ("monitoring app", ("none", "basic", "premium"), "taste"),
            ("maintenance", ("none", "1 year", "5 years", "10 years"), "opposed"),
            ("permit paperwork", ("customer", "installer"), "shared"),
        ),
    ),
)

_FILLERS = {
    "year": ("2016", "2018", "2019", "2021", "2022"),
    "km": ("45", "80", "120", "160"),
    "n": ("20", "50", "80", "120", "200", "300"),
    "shop": ("bakery", "bookshop", "dental clinic", "yoga studio", "bike shop", "cafe", "law firm"),
}


def _fill(template: str, rng: np.random.Generator) -> str:
    return template.format(**{k: str(rng.choice(v)) for k, v in _FILLERS.items()})


def _price_options(product: Product, n: int, rng: np.random.Generator) -> tuple[str, ...]:
    lo, hi = product.price_range
    centre = float(rng.uniform(lo, hi))
    spread = float(rng.uniform(0.15, 0.45)) * centre
    # Round each level to a "nice" step so prices read like prices; keep them distinct and ascending.
    step = 10 ** max(0, int(np.log10(centre)) - 2)
    levels = np.linspace(centre - spread / 2, centre + spread / 2, n)
    prices = sorted({int(round(p / step) * step) for p in levels})
    while len(prices) < n:
        prices.append(prices[-1] + step)
    return tuple(f"${p:,}" for p in prices)


def _values(kind: str, n: int, side: str, rng: np.random.Generator) -> list[float]:
    """Values in [0, 1] with the best option at 1 (as Genius normalises)."""
    if kind == "taste":
        raw = rng.uniform(0.0, 1.0, n)
        raw[rng.integers(n)] = 1.0
        return [float(v) for v in raw]
    ramp = np.linspace(0.0, 1.0, n) ** float(rng.uniform(0.6, 1.6))
    likes_last = {"shared": True, "opposed": side == "buyer", "price": side == "seller"}
    ascending = likes_last[kind]
    return [float(v) for v in (ramp if ascending else ramp[::-1])]


def _weights(names: list[str], price_boost: float, rng: np.random.Generator) -> dict[str, float]:
    raw = rng.dirichlet(np.ones(len(names)))
    raw[0] += price_boost  # price is issue 0 and usually matters most to both
    raw = np.round(raw / raw.sum(), 4)
    raw[-1] = round(1.0 - float(raw[:-1].sum()), 4)
    return {n: float(w) for n, w in zip(names, raw)}


def _round_values(values: list[float]) -> dict[int, float]:
    return {i: round(v, 4) for i, v in enumerate(values)}


def _draw(index: int, seed: int, max_turns: int, rng: np.random.Generator) -> Scenario | None:
    product = CATALOGUE[int(rng.integers(len(CATALOGUE)))]
    n_issues = int(rng.integers(3, 7))
    chosen = sorted(rng.choice(len(product.issues), size=n_issues - 1, replace=False).tolist())
    specs: list[IssueSpec] = [("price", _price_options(product, int(rng.integers(4, 9)), rng), "price")]
    specs += [product.issues[i] for i in chosen]
    # Keep the outcome space small enough for exact analytics: drop the last non-price issues first.
    while np.prod([len(o) for _, o, _ in specs]) > MAX_OUTCOMES and len(specs) > 3:
        specs.pop()

    issues = tuple(Issue(name=name, options=opts) for name, opts, _ in specs)
    names = [i.name for i in issues]
    prefs: dict[str, dict] = {}
    for side in ("seller", "buyer"):
        values = {}
        for name, opts, kind in specs:
            vals = _round_values(_values(kind, len(opts), side, rng))
            values[name] = {opts[i]: v for i, v in vals.items()}
        prefs[side] = {"weights": _weights(names, float(rng.uniform(0.3, 1.0)), rng), "values": values}

    draft = Scenario(
        id="draft", context="draft", issues=issues,
        seller=Preferences(reservation=0.0, **prefs["seller"]),
        buyer=Preferences(reservation=0.0, **prefs["buyer"]),
        max_turns=max_turns,
    )
    nash = analyze(draft).nash  # with zero reservations: a fair, efficient point to anchor the reservations
    assert nash is not None
    us, ub = nash.utilities
    r_s = round(float(rng.uniform(0.35, 0.85)) * us, 4)
    r_b = round(float(rng.uniform(0.35, 0.85)) * ub, 4)
    scenario = Scenario(
        id=f"s{seed}-{index:05d}",
        context=_fill(product.contexts[int(rng.integers(len(product.contexts)))], rng),
        issues=issues,
        seller=Preferences(reservation=r_s, **prefs["seller"]),
        buyer=Preferences(reservation=r_b, **prefs["buyer"]),
        max_turns=max_turns,
        source={"kind": "generated", "product": product.kind, "seed": seed, "index": index},
    )
    return scenario if is_well_posed(scenario) else None


def is_well_posed(scenario: Scenario) -> bool:
    """A zone of agreement exists, and neither side's best outcome is acceptable to the other."""
    a = analyze(scenario)
    return a.has_agreement_zone and not a.trivial


def generate_scenarios(n: int, seed: int, max_turns: int = 10) -> list[Scenario]:
    out: list[Scenario] = []
    for index in range(n):
        rng = np.random.default_rng([seed, index])
        for _ in range(1000):
            scenario = _draw(index, seed, max_turns, rng)
            if scenario is not None:
                out.append(scenario)
                break
        else:  # pragma: no cover - the catalogue makes this practically impossible
            raise RuntimeError(f"could not draw a well-posed scenario for index {index} with seed {seed}")
    return out
