"""Golden hashes: frozen before the restructure, so a cache written by an earlier version of
Rewind still hits after code moves. A change that breaks one of these invalidates every user's
cache; it must be deliberate and said in the changelog (README, "Changes that re-run cached
nodes"), never a side effect of a refactor. The demo's input hashes were re-frozen once, when
keys began to tell apart values canonical JSON spells alike (`form:` parts); every output hash
is the same as before."""

from __future__ import annotations

import datetime

import pytest

import rewind
from rewind.pipelines.research import pipeline

VALUES = {
    "str": "h\u00e9llo", "int": 1, "float": 1.5, "neg0": -0.0, "big": 2**60,
    "list": [1, "a", None, True], "dict": {"b": 1, "a": [2, 3]},
    "nested": {"x": {"y": {"z": [1.0, 2.25]}}},
    "date": datetime.date(2024, 1, 2), "dt": datetime.datetime(2024, 1, 2, 3, 4, 5),
    "set": {3, 1, 2}, "tuple": (1, 2), "bytes": b"\x00\x01ab", "empty": {},
}

CANONICAL = {
    "str": "a537896e9aa53fa93651715b791fabe8a1843c12ffe14d96404ec89c5b89818b",
    "int": "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b",
    "float": "9f29a130438b81170b92a42650f9a94291ecad60bd47af2a3886e75f7f728725",
    "neg0": "5feceb66ffc86f38d952786c6d696c79c2dbc239dd4e91b46729d73a27fb57e9",
    "big": "940721ea09245b6f5b5fe826698b0e5b2f1842932f040069f2a14e260c26ad20",
    "list": "26aedb538fb2c3ea5a94fcbdab2a7aeed791729f32edd40bf1147841f3999e91",
    "dict": "2aae3bfa906be39530e7d7a4aa90a7e6d4f29c33e3ac80e1c3b05598c5953c04",
    "nested": "4e7be74457d9738914487ea430e4bf022ff20fa466bd75027ae0f22aec330a35",
    "date": "b5b6cffc1cf02a2b240125875dc8ff5803b5a03c257dd1cead5ed8fcdfe09c59",
    "dt": "f49b3b848ed4e6b08501b657c2e4f2c6ddda994d12d18c1ab626d8cc508fe7e1",
    "set": "a615eeaee21de5179de080de8c3052c8da901138406ba71c38c032845f7d54f4",
    "tuple": "49a64717d5d4cb19952e6eac2946415cf6879adacf9908e7d872332d32c6e684",
    "bytes": "053f615b2f3c462750ff755830262c031ade2b172b9fd1ade7006600a879a4d4",
    "empty": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
}

DEMO_STEPS = [
    ('plan', 'd2f34b0bd828f1b64d1d1dc5e8481d1d187bd1a13acb0d02919b48b06ec8f2bb',
     '11a48dfdacd75dab400b0816652dd078e3d9500a77f29446ade5fe3f0d05ccbc'),
    ('research', '4794ca7e17cdb3f11e68733470054752e3b38ade776185d4bd2dcd5aedaca74a',
     '4cf61e8c09a4c54d4879bccb4f70ae7b091732d41f13aff40b201aed4cdf2b2a'),
    ('analyse', '93aeb22e0d8a86e250ce627d8ac54c1d9f157e7534198ee889ed04a1837ddbcf',
     '2deb830bc564ce5701eb74e181713013993cad32f25fe7ad6e32d8c6ecc4a988'),
    ('critique', 'bd3850bac7683a1f7882261ee84b8057b80e6269a6011947e01bae922b345464',
     'e2b28c63aa9dcd2edf43c2c40503933846c92c060a3980d9b0f8775a1e9a827b'),
    ('revise', '4d32cd2f2b8cd6c25815077f75edfd9fa723ba71b0d088453b00960187442033',
     '7ae0d6a20eb98d7f8831b2005a1ddc714bad9cffa0bdbb58b8bfd43543e1b7df'),
    ('compose', '0af86f22681a34e8959a2d8bbc0ee371359aa3c58949dea5a1b12c58660a8d67',
     '1b81700971f87ed63f22022b6b08f6a03b6a7b035968ddff6094a06999f4b9b1'),
    ('verify', '47ba89ed7ed7d1757948f1cc4a813c6f2f1276e72edf41f672023dda74dc02f6',
     'd15ee77ebb79c54e838adfb8412aa805ff954d7d1e4587c6fb625f3b60107b23'),
    ('publish', 'd51f374daff55f598b38e1fe08abe3ffa91b3249650e847ecf92da227ada3605',
     '6ae904129858f750b3500d714c7682a3c11abae25527b2e45df0b53f38b089bc'),
]


@pytest.mark.parametrize("name", sorted(VALUES))
def test_canonical_hash_is_frozen(name):
    assert rewind.canonical_hash(VALUES[name]) == CANONICAL[name]


def test_demo_run_input_and_output_hashes_are_frozen(tmp_path):
    rw = rewind.Rewind(str(tmp_path / "golden.db"))
    run = rw.run(pipeline, {"question": "How do Python generators work?"})
    # publish's receipt names the outbox file (under tmp_path): only its input hash is frozen
    got = [(s.node, s.input_hash, s.output_hash if s.node != "publish" else None) for s in run.steps]
    assert got == [(n, i, o if n != "publish" else None) for n, i, o in DEMO_STEPS]
