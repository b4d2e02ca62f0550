"""Byte-identity of the offline model across refactors: prompts that carry no style instruction
(points, case, tone, length, language) must keep producing exactly the text, finish reason,
token counts and id they produced before `rewind.simulator` became `rewind.sim` and learnt to
follow instructions. The hashes were taken from the 1,092-line `rewind/simulator.py`.

The prompts include the demo's templates and near-misses of instructions ("3 to 5 numbered
sub-questions", "Keep it short", "a one-line verdict", "French" in data) that must not trigger.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from rewind.model import sim
from rewind.pipelines import research as R

SRC = ("[doc:epa-heat] EPA heat island report: Urban areas can be 7 degrees warmer than their "
       "rural surroundings. Dark roofs and pavement store heat.\n"
       "[doc:x] Canopy study: Tree canopy cover lowers surface temperature by up to 12 degrees "
       "in dense neighbourhoods. French and Spanish cities publish in French journals.")
ANALYSIS = ("Urban heat is a big problem. It may affect many people. Trees really help a lot of "
            "neighbourhoods [doc:x]. Roofs store 7 degrees of heat.")
CRIT = "1. \"Urban heat is a big problem\" is unsupported.\n2. Vague wording."

def corpus():
    q = "How do Python generators work?"
    P = [
        [{"role": "user", "content": R.fill(R.PLAN_PROMPT, question=q)}],
        [{"role": "user", "content": R.fill(R.PLAN_PROMPT, question="Context managers and the with statement")}],
        [{"role": "user", "content": R.fill(R.CRITIQUE_PROMPT, question=q, analysis=ANALYSIS)}],
        [{"role": "user", "content": R.fill(R.REVISE_PROMPT, question=q, analysis=ANALYSIS, critique=CRIT, sources=SRC)}],
        [{"role": "user", "content": R.fill(R.COMPOSE_PROMPT, question=q, draft=ANALYSIS, sources=SRC)}],
        [{"role": "system", "content": "Compose a short report for the reader. Quote and cite the sources."},
         {"role": "user", "content": "Topic: urban heat islands\n\nSources:\n" + SRC}],
        [{"role": "user", "content": "Explain the trade-offs of solar panels on urban rooftops."}],
        [{"role": "user", "content": "What is the capital of France, and why is French spoken there?"}],
        [{"role": "user", "content": "Analyse the sources on urban heat.\n\nSources:\n" + SRC}],
        [{"role": "user", "content": "Plan research on soil health in one short paragraph of notes"}],
        [{"role": "user", "content": "Keep it short: the history of the printing press"}],
        [{"role": "user", "content": "Give a one-line verdict on remote work productivity"}],
        [{"role": "user", "content": "Write 3 to 5 numbered sub-questions about tides"}],
        [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "hello"}],
        [{"role": "user", "content": ""}],
        [{"role": "user", "content": "Revise the draft.\n\nDraft:\nThings are very good. But it is bad.\n\nCritique:\n1. \"Things are very good\" vague"}],
        [{"role": "user", "content": "Critique: nothing here"}],
        [{"role": "user", "content": "Describe formal verification of software and playful learning in schools."}],
    ]
    out = []
    for i, msgs in enumerate(P):
        for model in ("sim-small", "sim-large"):
            out.append((f"p{i}-{model}-t0", msgs, dict(model=model)))
        out.append((f"p{i}-t1-s7", msgs, dict(model="sim-small", temperature=1.0, seed=7)))
        out.append((f"p{i}-t05-s3-n2", msgs, dict(model="sim-large", temperature=0.5, seed=3, n=2)))
        out.append((f"p{i}-max9", msgs, dict(model="sim-small", max_tokens=9)))
    return out


FROZEN = {
    'p0-max9': '1ec4a8e3993860f8',
    'p0-sim-large-t0': 'd753ceccf7f01eca',
    'p0-sim-small-t0': '20153378053315b4',
    'p0-t05-s3-n2': 'bc13c75fb9ef403b',
    'p0-t1-s7': '204b39825b9d9dd3',
    'p1-max9': '5a6df60c8b53b34f',
    'p1-sim-large-t0': '99a3a5a5024b28df',
    'p1-sim-small-t0': '9ad247e49bebf9ba',
    'p1-t05-s3-n2': '8437fee07fe59530',
    'p1-t1-s7': '3e2be164ed4eff34',
    'p10-max9': 'dbe846addfd2ab91',
    'p10-sim-large-t0': 'da1019a098075274',
    'p10-sim-small-t0': '2768ea52a13a5c3e',
    'p10-t05-s3-n2': '11177692983b0a7f',
    'p10-t1-s7': '52a17307d8ff0612',
    'p11-max9': '64ddc2f39eb26dbd',
    'p11-sim-large-t0': '76267c8646b4352a',
    'p11-sim-small-t0': '7982af7e9d16b1a7',
    'p11-t05-s3-n2': 'e80eb5f023fa92ba',
    'p11-t1-s7': 'f8c439157f4ba653',
    'p12-max9': '08626a29d7acc924',
    'p12-sim-large-t0': '6d2ae313a2ab26be',
    'p12-sim-small-t0': '4a501157d6ca1c2c',
    'p12-t05-s3-n2': '810b8173c22b0ac1',
    'p12-t1-s7': '56fbe655352944e2',
    'p13-max9': '1900cef2027b5640',
    'p13-sim-large-t0': '847d571189602a14',
    'p13-sim-small-t0': '0f79da0a2fe36313',
    'p13-t05-s3-n2': '05b0fdaef45fa246',
    'p13-t1-s7': '9b4dadc430a0d9e1',
    'p14-max9': 'f2426a64b7314b61',
    'p14-sim-large-t0': '9405034fbb0d8d9a',
    'p14-sim-small-t0': 'f2426a64b7314b61',
    'p14-t05-s3-n2': '947ea0855835caa6',
    'p14-t1-s7': 'fe8c676e24998486',
    'p15-max9': '9559de89ceb8485a',
    'p15-sim-large-t0': 'efb93fe2223c1eaa',
    'p15-sim-small-t0': '972ee7e5a3cd442c',
    'p15-t05-s3-n2': 'b7df3d9b3bb82813',
    'p15-t1-s7': '9be881aeb16f2f86',
    'p16-max9': 'f1d6447843723b78',
    'p16-sim-large-t0': 'e2e34434c74adda1',
    'p16-sim-small-t0': '0b3171e3e5e55077',
    'p16-t05-s3-n2': 'f9cdadc01a8f7180',
    'p16-t1-s7': '41b478bfb07ce2d6',
    'p17-max9': '43f0a17b245f59ed',
    'p17-sim-large-t0': '931dd5f3c335147b',
    'p17-sim-small-t0': 'b030d9c4e663bf03',
    'p17-t05-s3-n2': '63e3d22c7de4074c',
    'p17-t1-s7': '6a6ec989e9c766e0',
    'p2-max9': 'f9ab4bb147f2c838',
    'p2-sim-large-t0': 'a9862f36c2e050b8',
    'p2-sim-small-t0': 'a3c22dc81d6a06e9',
    'p2-t05-s3-n2': 'd196744dba79fc4d',
    'p2-t1-s7': '059acc0100007869',
    'p3-max9': '31aef8e6e69c6bb1',
    'p3-sim-large-t0': '85f08d4f2645d70e',
    'p3-sim-small-t0': '4303e35bea718c42',
    'p3-t05-s3-n2': 'b444e039ff17f531',
    'p3-t1-s7': 'ece4636983f03bc3',
    'p4-max9': 'a2237e314e0b6c61',
    'p4-sim-large-t0': '2f7d5a0279cfb44f',
    'p4-sim-small-t0': '0fc9bb8e6a25cd7c',
    'p4-t05-s3-n2': 'a354c45de09c424f',
    'p4-t1-s7': '476a232497b8939a',
    'p5-max9': 'e82296fb26d93a30',
    'p5-sim-large-t0': 'c4794bb53e79a2e7',
    'p5-sim-small-t0': '22d2b237837eae68',
    'p5-t05-s3-n2': '8406983ff362878a',
    'p5-t1-s7': 'd7e793696f5951f0',
    'p6-max9': '801a0e403309ca0a',
    'p6-sim-large-t0': 'e07e56e257114c3a',
    'p6-sim-small-t0': 'c77e2d1a6719c0f5',
    'p6-t05-s3-n2': '18abb7b67295af5d',
    'p6-t1-s7': 'd0b7de728d1a8da9',
    'p7-max9': 'd07b982af483e2a0',
    'p7-sim-large-t0': 'a6f0b0c152cfb553',
    'p7-sim-small-t0': '9e7e98a8bda5ec5e',
    'p7-t05-s3-n2': '46161a38062c56d5',
    'p7-t1-s7': '060b2a52c89227b0',
    'p8-max9': 'f3db480560ce3466',
    'p8-sim-large-t0': 'b17e6bb44d6f7cd3',
    'p8-sim-small-t0': '84b3402fbacef471',
    'p8-t05-s3-n2': 'ceca5ac2afaa9c15',
    'p8-t1-s7': 'c16ba3dfaffc5108',
    'p9-max9': '57dddd2cc99ab5b4',
    'p9-sim-large-t0': '7a6013bed0c4297b',
    'p9-sim-small-t0': '985b4d65a81deb71',
    'p9-t05-s3-n2': '74ef3b6744e30f38',
    'p9-t1-s7': '5f433806b5163fc8',
}

CASES = {name: (msgs, kw) for name, msgs, kw in corpus()}


def _digest(msgs, kw) -> str:
    kw = dict(kw)
    cs = sim.complete(kw.pop("model"), msgs, **kw)
    blob = json.dumps([[c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens, c.task, c.id]
                       for c in cs])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_the_corpus_is_the_frozen_one():
    assert sorted(CASES) == sorted(FROZEN)


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_output_without_instructions_is_byte_identical(name):
    msgs, kw = CASES[name]
    assert _digest(msgs, kw) == FROZEN[name]
