"""A fork's param of the wrong type for its parameter's annotation (found over MCP: `temperature:
"hot"`) is refused up front, naming the node and the param, instead of a failed run."""

from __future__ import annotations

import pytest

import rewind
from rewind.errors import InvalidRequest


def test_a_fork_param_of_the_wrong_type_is_refused_up_front(store_url):
    from rewind.pipelines.research import pipeline

    with rewind.Rewind(store_url) as rw:
        run = rw.run(pipeline, {"question": "How does the import system find modules?"})
        before = rw.count_runs()
        with pytest.raises(InvalidRequest, match="param 'temperature' of node 'critique' takes a float, not str"):
            rw.fork(run.id, at="critique", params={"temperature": "hot"})
        assert rw.fork(run.id, at="critique", params={"temperature": 1}).status == "completed"
        assert rw.count_runs() == before + 1  # the refused one wrote nothing
