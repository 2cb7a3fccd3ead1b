"""Retrieval quality: does recall find the memories that answer a question?

Data, generated here with a fixed seed (nothing is downloaded): --people synthetic
people, each with about --memories memories: facts about them (job, home, family, pets,
health, habits...), each worded in one of several ways, and everyday chatter that shares
their vocabulary (hard negatives). Every question has known answer memories:

* ``lexical``: shares content words with its answer ("What is the name of her dog?");
* ``paraphrase``: says the same with other words ("What does she do for a living?" for
  "Works as a nurse at the Riverside clinic");
* ``indirect``: asks for what the fact implies ("What should I not cook for her?" for
  "Allergic to peanuts");
* ``multi-hop``: needs two memories ("Where does her sister live?": "Her sister is
  called Marta" and "Marta moved to Oslo", which does not say "sister").

Printed, in one run, recall@5, recall@10 (the share of a question's answer memories in
the top k, averaged) and MRR (reciprocal rank of the first answer), overall and per kind,
for: BM25 alone (``rank-bm25``, an independent baseline), each installed embedder alone
(exact cosine over the person's memories), and the ledger's own recall end to end
(``Projections.recall`` on a real ledger, one per embedder) with the default blend, the
other fusions measured for ADR 0022, and relevance only (salience weight 0). Facts are
recorded with higher salience than chatter (U(0.6, 0.9) vs U(0.2, 0.6)), as an extractor
would; "relevance only" shows the ranking without that help.

Usage: python benchmarks/recall_quality.py [--people 6] [--memories 500] [--embedders
       hashing,wordllama,minilm]
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/projections.py would shadow the projections package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ledger.application import LedgerApp
from ledger.home import Config
from projections.embedder import STOPWORDS, Embedder, configured, embed_matrix, from_spec
from projections.service import Projections, RecallWeights

FIRST = ["Ana", "Bea", "Clara", "Dora", "Elena", "Fiona", "Greta", "Hilda", "Ines", "Julia"]
SIBLINGS = ["Marta", "Lucia", "Sofia", "Nadia", "Olga", "Petra", "Rosa", "Sara"]
CITIES = ["Oslo", "Lisbon", "Vienna", "Porto", "Krakow", "Dublin", "Seville", "Tallinn"]
JOBS = [("nurse", "the Riverside clinic"), ("accountant", "Hallam & Co"),
        ("teacher", "Northgate primary school"), ("software engineer", "Acme"),
        ("architect", "Studio Lind"), ("pharmacist", "the Main Street pharmacy"),
        ("chef", "the Blue Door restaurant"), ("lawyer", "Brandt Partners")]
PETS = [("dog", "Rex"), ("cat", "Mochi"), ("parrot", "Kiwi"), ("rabbit", "Bun"),
        ("dog", "Bruno"), ("cat", "Luna"), ("tortoise", "Sheldon"), ("hamster", "Pip")]
ALLERGIES = ["peanuts", "shellfish", "gluten", "dairy", "eggs", "sesame"]
HOBBIES = [("plays the violin", "music"), ("climbs on weekends", "climbing"),
           ("paints watercolours", "painting"), ("runs marathons", "running"),
           ("knits scarves", "knitting"), ("plays chess online", "chess")]
CARS = ["a red Volvo", "an old Fiat", "a blue Toyota", "a white Tesla", "a green Skoda"]
DRINKS = ["green tea", "black coffee", "oat lattes", "sparkling water", "mint tea"]

CHATTER = [
    "Mentioned the weather in {city} was awful on {day}.",
    "Said the meeting on {day} ran long and she was tired.",
    "Complained that the train was late on {day} morning.",
    "Watched a documentary about {topic} last night.",
    "Asked for a recommendation for a book about {topic}.",
    "Was planning a short trip to {city} for a conference.",
    "Laughed about a video of a {animal} chasing its tail.",
    "Said her friend bought a new {thing} and loves it.",
    "Talked about repainting the kitchen {colour}.",
    "Said she forgot her umbrella again on {day}.",
    "Is reading a novel set in {city} in the 1920s.",
    "Mentioned a podcast episode about {topic}.",
    "Had a long phone call with an old school friend on {day}.",
    "Said the neighbours are renovating and it is noisy.",
    "Wants to learn more about {topic} this year.",
    "Found a nice {thing} at the flea market.",
    "Asked how to fix a squeaky door hinge.",
    "Said {day} is usually her busiest day.",
    "Was annoyed that the printer at home stopped working.",
    "Thinks the new cafe near the park is overpriced.",
]
FILL = {
    "city": ["Madrid", "Berlin", "Paris", "Rome", "Prague", "Geneva", "Athens", "Milan"],
    "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "topic": ["volcanoes", "ancient Rome", "jazz history", "deep sea fish", "bees",
              "the stock market", "medieval castles", "black holes", "gardening"],
    "animal": ["goat", "duck", "horse", "squirrel", "puppy", "kitten"],
    "thing": ["lamp", "bicycle", "sofa", "camera", "teapot", "rug", "guitar"],
    "colour": ["yellow", "sage green", "white", "terracotta", "navy"],
}


@dataclass
class Question:
    kind: str
    text: str
    answers: list[int]


@dataclass
class Person:
    name: str
    memories: list[str] = field(default_factory=list)
    salience: list[float] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    def fact(self, rng: random.Random, *texts: str) -> int:
        self.memories.append(rng.choice(texts))
        self.salience.append(round(rng.uniform(0.6, 0.9), 2))
        return len(self.memories) - 1

    def ask(self, kind: str, text: str, *answers: int) -> None:
        self.questions.append(Question(kind, text, list(answers)))


def person(i: int, rng: random.Random, total: int) -> Person:
    p = Person(f"{FIRST[i % len(FIRST)]}")
    n = p.name
    job, employer = rng.choice(JOBS)
    a = p.fact(rng, f"{n} works as a {job} at {employer}.",
               f"Her job: {job} at {employer}, for six years now.",
               f"Has been a {job} at {employer} since 2019.")
    p.ask("lexical", f"Where does {n} work as a {job}?", a)
    p.ask("paraphrase", "What does she do for a living?", a)
    p.ask("indirect", "Who is her employer?", a)
    city = rng.choice(CITIES)
    a = p.fact(rng, f"{n} lives in {city} with her partner.",
               f"Home is a flat in {city}, near the old town.")
    p.ask("lexical", f"In which city does {n} live?", a)
    p.ask("paraphrase", "Where is her home?", a)
    p.ask("indirect", "Which town should I send the birthday card to?", a)
    sister, sister_city = rng.choice(SIBLINGS), rng.choice([c for c in CITIES if c != city])
    a = p.fact(rng, f"Her sister is called {sister}.", f"{n} has one sister, {sister}.")
    b = p.fact(rng, f"{sister} moved to {sister_city} last year for a new job.",
               f"{sister} has lived in {sister_city} since the spring.")
    p.ask("lexical", f"What is the name of {n}'s sister?", a)
    p.ask("multi-hop", "Where does her sister live?", a, b)
    pet, pet_name = rng.choice(PETS)
    a = p.fact(rng, f"Has a {pet} named {pet_name}.", f"Her {pet} {pet_name} is three years old.")
    p.ask("lexical", f"What is the name of her {pet}?", a)
    p.ask("paraphrase", "Does she have any animals at home?", a)
    c = p.fact(rng, f"{pet_name} was at the vet on Friday with a sore paw.",
               f"{pet_name} needs medicine twice a day since the vet visit.")
    p.ask("multi-hop", f"How is her {pet} doing?", a, c)
    allergy = rng.choice(ALLERGIES)
    a = p.fact(rng, f"Allergic to {allergy}; carries an EpiPen.",
               f"Severe {allergy} allergy, diagnosed as a child.")
    p.ask("lexical", f"Is {n} allergic to anything?", a)
    p.ask("indirect", "What should I avoid cooking when she comes to dinner?", a)
    p.ask("paraphrase", "Which foods make her ill?", a)
    hobby, hobby_word = rng.choice(HOBBIES)
    a = p.fact(rng, f"{n} {hobby}.", f"In her free time she {hobby}.")
    p.ask("lexical", f"Does she like {hobby_word}?", a)
    p.ask("paraphrase", "What does she do for fun?", a)
    car = rng.choice(CARS)
    a = p.fact(rng, f"Drives {car} to the office.", f"Owns {car}, bought second hand.")
    p.ask("paraphrase", "What vehicle does she have?", a)
    p.ask("indirect", "How does she get to work?", a)
    drink = rng.choice(DRINKS)
    a = p.fact(rng, f"Always orders {drink} in the morning.", f"Her favourite drink is {drink}.")
    p.ask("lexical", f"What is {n}'s favourite drink?", a)
    p.ask("paraphrase", "What beverage does she prefer?", a)
    a = p.fact(rng, "Her mother had a hip operation in March and is recovering.",
               "Mum is recovering from hip surgery.")
    p.ask("paraphrase", "Is anyone in her family unwell?", a)
    p.ask("lexical", "How is her mother recovering from the operation?", a)
    a = p.fact(rng, "Is learning Japanese for a trip to Kyoto next autumn.",
               "Takes Japanese lessons on Tuesday evenings.")
    p.ask("paraphrase", "Which language is she studying?", a)
    p.ask("indirect", "Where is she travelling later this year?", a)
    a = p.fact(rng, "Her daughter Emma starts university in September.",
               "Emma, her eldest, is about to begin studying medicine.")
    b = p.fact(rng, "Emma wants to become a surgeon like her grandfather.",
               "Emma has been accepted at the medical school in Edinburgh.")
    p.ask("paraphrase", "Does she have children?", a)
    p.ask("multi-hop", "What is her daughter going to study?", a, b)
    while len(p.memories) < total:
        t = rng.choice(CHATTER)
        p.memories.append(t.format(**{k: rng.choice(v) for k, v in FILL.items()}))
        p.salience.append(round(rng.uniform(0.2, 0.6), 2))
    return p


def shuffle(p: Person, rng: random.Random) -> None:
    order = list(range(len(p.memories)))
    rng.shuffle(order)
    where = {old: new for new, old in enumerate(order)}
    p.memories = [p.memories[i] for i in order]
    p.salience = [p.salience[i] for i in order]
    for q in p.questions:
        q.answers = [where[a] for a in q.answers]


_WORD = re.compile(r"[^\W_]+")


def tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


Ranker = Callable[[Person, Question], list[int]]


def score(people: Sequence[Person], rank: Ranker) -> dict[str, tuple[float, float, float, int]]:
    """kind -> (recall@5, recall@10, MRR, questions), plus 'all'."""
    acc: dict[str, list[tuple[float, float, float]]] = {}
    for p in people:
        for q in p.questions:
            got = rank(p, q)
            r5 = sum(1 for a in q.answers if a in got[:5]) / len(q.answers)
            r10 = sum(1 for a in q.answers if a in got[:10]) / len(q.answers)
            rr = next((1.0 / (i + 1) for i, m in enumerate(got) if m in q.answers), 0.0)
            for key in (q.kind, "all"):
                acc.setdefault(key, []).append((r5, r10, rr))
    return {k: (sum(v[0] for v in vs) / len(vs), sum(v[1] for v in vs) / len(vs),
                sum(v[2] for v in vs) / len(vs), len(vs)) for k, vs in acc.items()}


KINDS = ("lexical", "paraphrase", "indirect", "multi-hop", "all")
DEFAULT_LABEL = "linear 0.3 (default)"


def show(name: str, res: dict[str, tuple[float, float, float, int]],
         kinds: Sequence[str] = KINDS, width: int = 34) -> None:
    cells = "  ".join(f"{res[k][0]:.3f} {res[k][1]:.3f} {res[k][2]:.3f}" for k in kinds)
    print(f"{name:<{width}} {cells}", flush=True)


def bm25_ranker(people: Sequence[Person]) -> Ranker:
    from rank_bm25 import BM25Okapi

    models = {id(p): BM25Okapi([tokens(m) for m in p.memories]) for p in people}

    def rank(p: Person, q: Question) -> list[int]:
        scores = models[id(p)].get_scores(tokens(q.text))
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:10]
    return rank


def embedder_ranker(people: Sequence[Person], embedder: Embedder) -> Ranker:
    mats = {id(p): embed_matrix(embedder, p.memories) for p in people}

    def rank(p: Person, q: Question) -> list[int]:
        s = mats[id(p)] @ embed_matrix(embedder, [q.text])[0]
        return sorted(range(len(s)), key=lambda i: (-float(s[i]), i))[:10]
    return rank


Scores = dict[str, tuple[float, float, float, int]]


def ledger_rankers(people: Sequence[Person], folder: Path, embedder: Embedder | None,
                   weights: dict[str, RecallWeights]) -> dict[str, Scores]:
    """The ledger's own recall, per weights. ``embedder`` None: the ledger picks its
    embedder itself, exactly as a deployment with no configuration does."""
    home = folder / "ledger"
    if not home.exists():
        LedgerApp.initialize(home)
        app = LedgerApp(Config.load(home))
        for i, p in enumerate(people):
            app.register_subject({"ref": f"p{i}"})
            app.add_atoms([{"subject": f"p{i}", "text": m, "ref": f"p{i}-{j}", "salience": s}
                           for j, (m, s) in enumerate(zip(p.memories, p.salience, strict=True))])
        app.close()
    app = LedgerApp(Config.load(home))
    out = {}
    try:
        with Projections(app, embedder=embedder) as proj:
            proj.catch_up()
            ids: dict[int, dict[str, int]] = {}
            for i, _p in enumerate(people):
                rows = proj.memory_list(f"p{i}", refresh=False)
                ids[i] = {r["atom_id"]: int(r["ref"].split("-")[1]) for r in rows}
            index = {id(p): i for i, p in enumerate(people)}
            for label, w in weights.items():
                def rank(p: Person, q: Question, w: RecallWeights = w) -> list[int]:
                    i = index[id(p)]
                    r = proj.recall(q.text, f"p{i}", k=10, weights=w, refresh=False)
                    return [ids[i][a] for a in r.atom_ids]
                out[label] = score(people, rank)
    finally:
        app.close()
    return out


# ---------------------------------------------------------------- a public dataset
# MemoryBank's English evaluation set (Zhong et al., "MemoryBank: Enhancing Large Language
# Models with Long-Term Memory", AAAI 2024; github.com/zhongwanjun/MemoryBank-SiliconFriend,
# MIT licence, Copyright (c) 2023 Wanjun Zhong): 15 people's dated chats with an assistant
# over ten days (eval_data/en/memory_bank_en.json) and 100 probing questions
# (eval_data/en/probing_questions_en.jsonl). Nothing of it is kept in this repository: pass
# --memorybank with a checkout of that repository. The dataset gives no answer locations,
# so the turns that answer each question are this project's own annotation, below:
# "MM-DD#i" is turn i (from 0) of that day's chat, several turns comma-separated, "-" a
# question the chats do not answer (left out). Each turn (the person's message and the
# reply, cut to an atom's 500 characters) is one memory, recorded on its day.
MEMORYBANK_GOLD: dict[str, tuple[str, ...]] = {
    "Emily": ("04-30#3", "05-01#0", "05-03#2", "04-28#1", "04-30#2,04-30#1", "05-02#1",
              "05-04#1"),
    "Jason": ("04-28#2,04-28#3", "04-29#3", "04-28#2,04-28#1", "04-27#4", "05-01#1",
              "05-02#3", "05-04#1"),
    "Frank": ("04-27#2", "04-28#8", "04-29#1", "05-05#2,05-05#1", "05-06#1", "04-30#1",
              "04-28#2,04-28#3"),
    "Lucy": ("04-27#3", "04-29#1,04-29#2", "04-28#1", "04-30#1", "05-03#0,04-30#2", "05-02#1",
             "04-28#1"),
    "Sunny": ("04-28#1", "04-27#4", "05-03#1", "05-01#1", "04-27#2,04-28#1", "04-30#1",
              "05-04#0"),
    "Linda": ("05-06#1", "05-06#1,05-06#3", "04-27#2,04-27#3", "04-28#3,04-28#2", "05-02#1",
              "05-01#1", "05-04#1"),
    "John Zhang": ("04-28#1", "04-29#0,04-29#1", "04-28#2", "04-30#0", "-", "05-04#0",
                   "05-06#0"),
    "Ivy": ("04-27#1,04-27#2", "05-06#2,05-06#1", "05-02#0", "04-28#2", "04-27#3", "05-05#0",
            "05-02#0"),
    "Henry": ("04-27#1", "04-30#0", "04-30#1", "05-04#1", "05-06#1", "04-28#2", "05-02#0"),
    "Gary": ("04-28#2", "05-04#0", "05-05#1", "05-04#1", "05-02#0,05-02#1", "04-30#0",
             "05-03#0"),
    "Jack": ("04-27#2", "04-27#2", "05-05#2", "04-30#1", "05-03#1", "05-02#1", "05-04#0"),
    "Roland": ("04-30#1,04-30#5", "04-30#2,04-30#6", "04-30#1,04-30#2,04-30#0", "05-02#1",
               "04-28#1,04-28#2", "04-27#2"),
    "Leo": ("04-27#2", "05-02#1", "05-02#2", "05-03#1", "05-03#1", "05-04#1", "05-06#0"),
    "Susan": ("04-27#1,04-27#2", "04-27#2", "04-30#1", "04-29#1", "05-04#1"),
    "Luna": ("04-28#1,04-28#2", "04-30#1,04-30#2", "05-04#0", "05-03#2", "04-28#4"),
}
MONTHS = {m: i for i, m in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"), start=1)}
_DATE = re.compile(r"\b(" + "|".join(MONTHS) + r")\s+(\d{1,2})(?:st|nd|rd|th)?\b", re.I)
MB_YEAR = 2023


def asked_day(question: str) -> str | None:
    """The day a question names ("On May 2nd, ..."), as YYYY-MM-DD; None when it names none.
    What an assistant would pass as since/until."""
    m = _DATE.search(question)
    if m is None:
        return None
    return f"{MB_YEAR}-{MONTHS[m.group(1).lower()]:02d}-{int(m.group(2)):02d}"


@dataclass
class DatedPerson(Person):
    days: list[str] = field(default_factory=list)  # per memory: the day it was said
    asked: list[str | None] = field(default_factory=list)  # per question: the day it names


def memorybank_people(checkout: Path, filler: bool = False) -> list[DatedPerson]:
    """One person per chat history. ``filler``: each person's memory also holds the other
    people's chats (their turns, on their days), as LongMemEval builds its haystacks from
    evidence sessions and sessions of other users; answers stay the person's own turns."""
    import json

    data = checkout / "eval_data" / "en"
    chats = json.loads((data / "memory_bank_en.json").read_text(encoding="utf-8"))
    asked: dict[str, list[str]] = {}
    for line in (data / "probing_questions_en.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            asked.update({k.strip(): v for k, v in json.loads(line).items()})
    turns: dict[str, list[tuple[str, str, str]]] = {}  # name -> (label, day, memory)
    for raw_name, person_chats in chats.items():
        turns[raw_name.strip()] = [
            (f"{day[5:]}#{j}", day, clip(f"{turn['query']}\n{turn['response']}"))
            for day, day_turns in sorted(person_chats["history"].items())
            for j, turn in enumerate(day_turns)]
    people = []
    for name, own in turns.items():
        p = DatedPerson(name)
        where: dict[str, int] = {}
        for other, theirs in turns.items():
            if other != name and not filler:
                continue
            for label, day, memory in theirs:
                if other == name:
                    where[label] = len(p.memories)
                p.memories.append(memory)
                p.salience.append(0.5)
                p.days.append(day)
        for text, labels in zip(asked[name], MEMORYBANK_GOLD[name], strict=True):
            if labels == "-":
                continue
            day = asked_day(text)
            p.ask("dated" if day else "undated", text, *(where[x] for x in labels.split(",")))
            p.asked.append(day)
        assert len(own) == len(where)
        people.append(p)
    return people


MB_KINDS = ("dated", "undated", "all")


def clip(text: str, limit: int = 500) -> str:
    """A turn as one memory: an atom's text is at most 500 characters, so a longer turn is
    cut at the last space before that (for every method alike)."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0]


DAY_LABEL = "default, the question's day as since/until"


def memorybank_ledger(people: Sequence[DatedPerson], folder: Path,
                      embedder: Embedder | None,
                      variants: Mapping[str, RecallWeights] | None = None) -> dict[str, Scores]:
    """The ledger's recall over the chats, each turn recorded on its day (the clock pinned
    with LEDGER_NOW, as a live assistant would have recorded it), asked the day after the
    last chat: with the default weights, and with the question's day as --since/--until;
    then each of ``variants`` (other weights) with the question's day too."""
    home = folder / "memorybank"
    saved = os.environ.get("LEDGER_NOW")
    try:
        os.environ["LEDGER_NOW"] = "2023-04-26T12:00:00Z"
        LedgerApp.initialize(home)
        app = LedgerApp(Config.load(home))
        for i, _p in enumerate(people):
            app.register_subject({"ref": f"m{i}"})
        for day in sorted({d for p in people for d in p.days}):
            os.environ["LEDGER_NOW"] = f"{day}T12:00:00Z"
            app.add_atoms([{"subject": f"m{i}", "text": m, "ref": f"m{i}-{j}", "salience": s}
                           for i, p in enumerate(people)
                           for j, (m, s, d) in enumerate(zip(p.memories, p.salience, p.days,
                                                             strict=True)) if d == day])
        app.close()
    finally:
        if saved is None:
            os.environ.pop("LEDGER_NOW", None)
        else:
            os.environ["LEDGER_NOW"] = saved
    asked_at = datetime(2023, 5, 8, 9, 0, tzinfo=UTC)
    app = LedgerApp(Config.load(home))
    out: dict[str, Scores] = {}
    try:
        with Projections(app, embedder=embedder) as proj:
            proj.catch_up()
            ids: dict[int, dict[str, int]] = {}
            for i, _p in enumerate(people):
                rows = proj.memory_list(f"m{i}", refresh=False, now=asked_at)
                ids[i] = {r["atom_id"]: int(r["ref"].split("-")[1]) for r in rows}
            index = {id(p): i for i, p in enumerate(people)}
            timed = "since" in inspect.signature(proj.recall).parameters

            def ranker(use_day: bool, weights: RecallWeights | None = None) -> Ranker:
                def rank(p: Person, q: Question) -> list[int]:
                    i = index[id(p)]
                    day = cast(DatedPerson, p).asked[p.questions.index(q)]
                    extra: dict[str, Any] = {}
                    if use_day and day is not None:
                        extra = {"since": f"{day}T00:00:00Z", "until": f"{day}T23:59:59Z"}
                    if weights is not None:
                        extra["weights"] = weights
                    r = proj.recall(q.text, f"m{i}", k=10, now=asked_at, refresh=False,
                                    **extra)
                    return [ids[i][a] for a in r.atom_ids]
                return rank

            out[DEFAULT_LABEL] = score(people, ranker(False))
            if timed:
                out[DAY_LABEL] = score(people, ranker(True))
                for label, weights in (variants or {}).items():
                    out[f"{label}, the question's day"] = score(people, ranker(True, weights))
            else:
                print("  (recall takes no since/until here: the time-filtered run is left out)")
    finally:
        app.close()
    return out


def run_memorybank(checkout: Path, embedders: Sequence[Embedder], default_id: str,
                   variants: Mapping[str, RecallWeights]) -> None:
    for filler in (False, True):
        people = memorybank_people(checkout, filler)
        nq = sum(len(p.questions) for p in people)
        dated = sum(1 for p in people for q in p.questions if q.kind == "dated")
        size = sum(len(p.memories) for p in people) // len(people)
        print(f"\nMemoryBank (MIT licence; {checkout}): {len(people)} people, {nq} questions "
              f"({dated} name a day); each person's memory: "
              + ("their own chats and the other people's as filler" if filler
                 else "their own chats") + f", {size} turns on average")
        print(f"{'method':<44} " + "  ".join(f"{k + ' r@5 r@10 MRR':<17}" for k in MB_KINDS))
        singles: dict[str, Scores] = {"BM25": score(people, bm25_ranker(people))}
        show("BM25 alone (rank-bm25)", singles["BM25"], MB_KINDS, 44)
        for e in embedders:
            singles[f"{e.id} alone"] = score(people, embedder_ranker(people, e))
            show(f"{e.id} alone (cosine)", singles[f"{e.id} alone"], MB_KINDS, 44)
        mine: Scores | None = None
        with tempfile.TemporaryDirectory(prefix="recall-memorybank-") as tmp:
            for e in embedders:
                is_default = e.id == default_id
                found = memorybank_ledger(people, Path(tmp) / e.id.replace("/", "-"),
                                          None if is_default else e,
                                          variants if is_default else None)
                for label, res in found.items():
                    show(f"ledger, {e.id}, {label}", res, MB_KINDS, 44)
                if is_default:  # the default weights; the time-filtered run if recall has it
                    mine = found.get(DAY_LABEL, found[DEFAULT_LABEL])
        if mine is not None:
            verdict(mine, singles, "MemoryBank" + (" with filler" if filler else ""))


def verdict(mine: Scores, singles: dict[str, Scores], data: str) -> None:
    """The ledger against the best single method, per measure (goal: 1.25x each)."""
    for m, name in ((0, "recall@5"), (1, "recall@10"), (2, "MRR")):
        best_name, best = max(singles.items(), key=lambda kv: kv[1]["all"][m])
        ratio = mine["all"][m] / best["all"][m] if best["all"][m] else float("inf")
        print(f"{data}: ledger {name} {mine['all'][m]:.3f} vs best single method "
              f"({best_name}) {best['all'][m]:.3f}: {ratio:.2f}x (goal 1.25x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--people", type=int, default=6)
    ap.add_argument("--memories", type=int, default=500)
    ap.add_argument("--embedders", default="hashing,wordllama,minilm")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--memorybank", type=Path, metavar="CHECKOUT",
                    help="a checkout of github.com/zhongwanjun/MemoryBank-SiliconFriend: "
                         "measure on its English chats and questions too")
    args = ap.parse_args()
    os.environ.setdefault("LEDGER_LOG_LEVEL", "warning")
    rng = random.Random(args.seed)
    people = [person(i, rng, args.memories) for i in range(args.people)]
    for p in people:
        shuffle(p, rng)
    nq = sum(len(p.questions) for p in people)
    print(f"{args.people} people, {sum(len(p.memories) for p in people)} memories, "
          f"{nq} questions (seed {args.seed})")
    print(f"{'method':<34} " + "  ".join(f"{k + ' r@5 r@10 MRR':<17}" for k in KINDS))
    single: list[tuple[str, Scores]] = [("BM25", score(people, bm25_ranker(people)))]
    show("BM25 alone (rank-bm25)", single[0][1])
    embedders: list[Embedder] = []
    for name in args.embedders.split(","):
        try:
            e = from_spec(name)
            t0 = time.perf_counter()
            e.embed(["warm up"])
            load = time.perf_counter() - t0
        except Exception as exc:
            print(f"{name}: not available ({exc.__class__.__name__}: {exc})")
            continue
        texts = [m for p in people for m in p.memories]
        t0 = time.perf_counter()
        embed_matrix(e, texts)
        rate = len(texts) / (time.perf_counter() - t0)
        print(f"  [{e.id}: load {load:.2f}s, {rate:,.0f} memories/s embedded]")
        embedders.append(e)
        single.append((f"{e.id} alone", score(people, embedder_ranker(people, e))))
        show(f"{e.id} alone (cosine)", single[-1][1])
    weights = {DEFAULT_LABEL: RecallWeights(),
               "linear 0.5": RecallWeights(fusion="linear", keyword_share=0.5),
               "rrf k=60 0.5": RecallWeights(fusion="rrf", rrf_k=60, keyword_share=0.5),
               "rrf k=5 0.7": RecallWeights(fusion="rrf", rrf_k=5, keyword_share=0.7),
               "default, relevance only": RecallWeights(salience=0.0, recency=0.0,
                                                        relevance=1.0)}
    default_id = configured(None).id  # no config.toml: what `Projections(app)` picks
    if os.environ.get("LEDGER_EMBEDDER"):
        print(f"  (LEDGER_EMBEDDER={os.environ['LEDGER_EMBEDDER']} sets the default)")
    singles = dict(single)
    ledgers: dict[str, Scores] = {}
    with tempfile.TemporaryDirectory(prefix="recall-quality-") as tmp:
        for e in embedders:
            is_default = e.id == default_id
            for label, res in ledger_rankers(people, Path(tmp), None if is_default else e,
                                             weights).items():
                show(f"ledger recall, {e.id}, {label}", res)
                ledgers[f"{e.id}, {label}"] = res
    mine = ledgers.get(f"{default_id}, {DEFAULT_LABEL}")
    if mine is None:
        print(f"the default embedder {default_id} was not measured (--embedders)")
        return
    print()
    verdict(mine, singles, "synthetic people")
    hashed = ledgers.get(f"hashing-v1/256, {DEFAULT_LABEL}")
    if hashed is not None and default_id != "hashing-v1/256":
        behind = [k for k in KINDS[:-1] if mine[k][1] < hashed[k][1]]
        print(f"against today's hashing-based recall: paraphrase recall@10 "
              f"{mine['paraphrase'][1]:.3f} vs {hashed['paraphrase'][1]:.3f}; behind on "
              + (", ".join(behind) if behind else "no kind of question"))
    if args.memorybank is not None:
        run_memorybank(args.memorybank, embedders, default_id,
                       {k: w for k, w in weights.items() if k != DEFAULT_LABEL})
    dedup_figures()


def dedup_figures() -> None:
    """Duplicate detection for ``on_similar`` (benchmarks/dedup_quality.py, in this run)."""
    path = Path(__file__).resolve().parent / "dedup_quality.py"
    if not path.exists():
        return
    spec = importlib.util.spec_from_file_location("dedup_quality", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print("\nduplicate detection for on_similar (benchmarks/dedup_quality.py):")
    module.main()

if __name__ == "__main__":
    main()
