"""``memstack eval stale``: stale-fact error of as-of ``facts`` vs. plain vector search.

The command generates an evolving-knowledge set: people who move between cities. Every move is
a ``lives_in`` fact AND a note saying the same ("Ana Silva moved to Porto"), valid from the
move's date. Knowledge arrives out of order on purpose: some moves become known only after a
later one (late facts), and some are corrected afterwards (same valid time, another city: "
Correction: ..."). Everything goes through Kafka (one session per person) and the stores are
rebuilt from the log, so transaction times are the broker's.

Queries pick a person, a valid time and a known time (one of the log times of the run) at
random. The truth is worked out independently of the stores from the events known at that
time: the value of the latest move (by valid time, then log position) valid at that time.
``stale_error_*`` is the fraction of queries answered with a value the person had at some other
time (a superseded value); ``error_*`` counts every wrong answer. Baselines over the notes
("Where does <name> live?", the city read from the note's text), in the same run:

- ``vector_asof`` (the fair one, the headline's comparison): vector search AS OF the question's
  valid and known time (the as-of prefilter a user of any vector store with time columns can
  write), top 10, and of the hits that name the person the one latest in valid time, then in
  log position (a correction, logged later for the same valid time, wins): what a careful user
  does with a vector store and timestamps;
- ``vector_now``: top-1 of plain vector search at "now" with the undated question (the naive
  use; reported to show what the as-of filter buys, not as the comparison).
``--quick``: 40 people, 200 queries (full: 200 people, 1,000 queries).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from memstack.client import Written
from memstack.foundation.builders import Defaults, EventBuilder
from memstack.jobs.eval.locomo import Ingested, ingested
from memstack.jobs.measure import Report, Result
from memstack.operators.log import LogPosition
from memstack.schemas.events import Event
from memstack.view import MemoryView, SearchHit

TENANT = "stale-eval"
RELATION = "lives_in"
FIRST = ("Ana", "Bruno", "Carla", "Diogo", "Eva", "Filipe", "Gina", "Hugo", "Ines", "Joao",
         "Karin", "Luis", "Marta", "Nuno", "Olga", "Pedro", "Rita", "Sara", "Tiago", "Vera")
LAST = ("Silva", "Santos", "Costa", "Pereira", "Oliveira", "Martins", "Sousa", "Ferreira",
        "Rocha", "Lopes")
CITIES = ("Lisbon", "Porto", "Braga", "Faro", "Coimbra", "Aveiro", "Evora", "Madrid", "Paris",
          "Berlin", "Vienna", "Prague", "Dublin", "Oslo", "Rome", "Milan", "Seville", "Lyon")
PHRASES = ("{n} moved to {c}.", "{n} now lives in {c}.", "{n} relocated to {c} for work.",
           "{n} settled in {c}.")
QUESTIONS = ("Where does {n} live?", "Which city is {n} living in?", "{n} lives in which city?")
START = datetime(2020, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Move:
    person: str
    city: str
    valid_from: datetime
    correction_of: str | None = None


def plan(rng: random.Random, people: int) -> list[Move]:
    """Moves in the order memory learns them (late facts and corrections included)."""
    names = [f"{f} {s}" for s in LAST for f in FIRST]
    rng.shuffle(names)
    queues: list[list[Move]] = []
    for name in names[:people]:
        at, moves = START + timedelta(days=rng.randint(0, 200)), []
        city = rng.choice(CITIES)
        for _ in range(rng.randint(3, 5)):
            moves.append(Move(name, city, at))
            at += timedelta(days=rng.randint(30, 400))
            city = rng.choice([c for c in CITIES if c != city])
        for i in range(len(moves) - 1):  # a late fact: learnt after the next move
            if rng.random() < 0.25:
                moves[i], moves[i + 1] = moves[i + 1], moves[i]
        for i in range(len(moves)):
            if rng.random() < 0.2:  # a correction of this move, learnt later
                old = moves[i]
                fix = Move(name, rng.choice([c for c in CITIES if c != old.city]),
                           old.valid_from, old.city)
                moves.insert(rng.randint(i + 1, len(moves)), fix)
        queues.append(moves)
    order: list[Move] = []
    while any(queues):  # interleave people at random, keeping each person's order
        queue = rng.choice([q for q in queues if q])
        order.append(queue.pop(0))
    return order


def events_of(moves: Sequence[Move], rng: random.Random) -> list[Event]:
    b = EventBuilder(Defaults(tenant=TENANT, agent="stale-eval", source="stale-eval"))
    out: list[Event] = []
    for m in moves:
        session = m.person.lower().replace(" ", "-")
        out.append(b.fact(session, m.person, RELATION, m.city, valid_from=m.valid_from))
        text = (f"Correction: {m.person} moved to {m.city}, not {m.correction_of}."
                if m.correction_of else rng.choice(PHRASES).format(n=m.person, c=m.city))
        out.append(b.note(session, text, subject=m.person, occurred_at=m.valid_from))
    return out


def truth(moves: Sequence[Move], at: Sequence[LogPosition], person: str, valid: datetime,
          known: datetime) -> str | None:
    """The city valid at ``valid`` from the moves known at ``known`` (log time, inclusive)."""
    best: tuple[datetime, LogPosition, str] | None = None
    for move, pos in zip(moves, at, strict=True):
        if move.person != person or pos.log_time > known or move.valid_from > valid:
            continue
        if best is None or (move.valid_from, pos) > best[:2]:
            best = (move.valid_from, pos, move.city)
    return None if best is None else best[2]


def city_in(text: str) -> str | None:
    found = [(text.find(c), c) for c in CITIES if c in text]
    return min(found)[1] if found else None


@dataclass
class Tally:
    queries: int = 0
    stale: dict[str, int] = field(default_factory=dict)
    wrong: dict[str, int] = field(default_factory=dict)

    def add(self, method: str, answer: str | None, expected: str, values: set[str]) -> None:
        self.wrong[method] = self.wrong.get(method, 0) + (answer != expected)
        self.stale[method] = self.stale.get(method, 0) + (answer != expected
                                                          and answer in values)


def latest_naming(hits: Sequence[SearchHit], person: str) -> str | None:
    """The city of the hit naming ``person`` that is latest in valid time, then log position."""
    named = [h.memory for h in hits if person in h.memory.text]
    if not named:
        return None
    best = max(named, key=lambda m: (m.vt_from, m.tt_from, m.partition, m.offset))
    return city_in(best.text)


def score(done: Ingested, moves: Sequence[Move], rng: random.Random, queries: int) -> Tally:
    fact_pos = [_position(w) for w in done.written[0::2]]
    log_times = sorted(p.log_time for p in fact_pos)
    values: dict[str, set[str]] = {}
    for m in moves:
        values.setdefault(m.person, set()).add(m.city)
    memory = MemoryView(TENANT, done.stores)
    people, tally = sorted(values), Tally()
    while tally.queries < queries:
        person = rng.choice(people)
        valid = START + timedelta(days=rng.randint(0, 2200))
        known = rng.choice(log_times)
        expected = truth(moves, fact_pos, person, valid, known)
        if expected is None:
            continue
        tally.queries += 1
        at = memory.as_of(valid, known)
        got = [f.object for f in at.facts(person, RELATION)]
        tally.add("facts", got[0] if len(got) == 1 else None, expected, values[person])
        question = rng.choice(QUESTIONS).format(n=person)
        hits = at.search(question, 10, kinds=["note"], mode="vector")
        tally.add("vector_asof", latest_naming(hits, person), expected, values[person])
        hits = memory.search(question, 1, kinds=["note"], mode="vector")
        said = city_in(hits[0].memory.text) if hits else None
        tally.add("vector_now", said, expected, values[person])
    return tally


def _position(w: Written) -> LogPosition:
    return LogPosition(w.log_time, w.partition, w.offset)


def run(quick: bool, report: Report) -> Result:
    rng = random.Random(20240501)
    people, queries = (40, 200) if quick else (200, 1000)
    moves = plan(rng, people)
    events = events_of(moves, rng)
    latest: dict[str, datetime] = {}
    late = 0
    for m in moves:
        late += m.correction_of is None and m.valid_from < latest.get(m.person, m.valid_from)
        latest[m.person] = max(latest.get(m.person, m.valid_from), m.valid_from)
    report("%d people, %d moves (%d corrections, %d learnt late), %d events", people,
           len(moves), sum(1 for m in moves if m.correction_of), late, len(events))
    with ingested(events, "stale", report) as done:
        tally = score(done, moves, rng, queries)
    n = tally.queries
    figures: dict[str, float] = {}
    for method in ("facts", "vector_asof", "vector_now"):
        report("%s: %d stale / %d wrong of %d", method, tally.stale[method],
               tally.wrong[method], n)
        figures[f"stale_error_{method}"] = tally.stale[method] / n
        figures[f"error_{method}"] = tally.wrong[method] / n
    return Result("eval stale", {
        **figures,
        "queries": float(n),
        "people": float(people),
        "moves": float(len(moves)),
    })
