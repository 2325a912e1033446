"""`log_event` as a true drop-in for article 003's: with only the import
swapped, events carry st.session_state["session_id"], under a real Streamlit script run
(streamlit.testing AppTest runs the script in this process, on Streamlit's script thread)."""

from __future__ import annotations

import threading

import pytest

from dslogs_collector import Tracer, log_event, set_default_tracer
from tests.collector_helpers import data_events, read_lines, validate

AppTest = pytest.importorskip("streamlit.testing.v1").AppTest

# article 003's app.py, its logging lines unchanged (no session_id passed)
ARTICLE_APP = """
import uuid
import streamlit as st
from dslogs_collector import log_event

if "session_id" not in st.session_state:
    st.session_state.session_id = SESSION
log_event("input", input_len=len("1+1等于几？"))
log_event("tokenize", duration_ms=1.5, input_len=9)
log_event("format", duration_ms=-1)
log_event("inference", 480.2, output_len=12, session_id="explicit-wins")
st.write("done")
"""

NO_SESSION_APP = """
import streamlit as st
from dslogs_collector import log_event
log_event("input", input_len=3)
st.write("done")
"""


@pytest.fixture()
def default_tracer(tmp_path):
    t = Tracer(tmp_path, handle_signals=False)
    set_default_tracer(t)
    yield t
    set_default_tracer(None)
    t.close()


def test_log_event_takes_the_streamlit_session_id(tmp_path, default_tracer):
    for sid in ("a1b2c3", "d4e5f6"):  # two browser sessions of one server process
        at = AppTest.from_string(ARTICLE_APP.replace("SESSION", repr(sid)))
        at.run(timeout=30)
        assert not at.exception, at.exception
        assert at.markdown[0].value == "done"
    at = AppTest.from_string(NO_SESSION_APP)
    at.run(timeout=30)
    assert not at.exception, at.exception
    # off Streamlit's script thread (a worker thread of the app): no session to read
    th = threading.Thread(target=log_event, args=("queue", 2.0))
    th.start()
    th.join()
    default_tracer.close()
    events = data_events(read_lines(tmp_path))
    for e in events:
        validate(e)
    got = [(e["stage"], e["session_id"]) for e in events]
    assert got == [
        ("input", "a1b2c3"), ("tokenize", "a1b2c3"), ("format", "a1b2c3"), ("inference", "explicit-wins"),
        ("input", "d4e5f6"), ("tokenize", "d4e5f6"), ("format", "d4e5f6"), ("inference", "explicit-wins"),
        ("input", "unknown"),  # Streamlit runs, the app set no session_id: the article's default
        ("queue", "unknown"),
    ]
    assert events[1]["duration_ms"] == 1.5 and events[2]["duration_ms"] == -1 and events[0]["duration_ms"] == -1
