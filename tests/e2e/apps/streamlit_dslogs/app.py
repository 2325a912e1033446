"""Article 003's Streamlit chat app instrumented with dslogs instead of utils/logger.py.

What changed against ../streamlit_article003/app.py:
* one Tracer per server process (st.cache_resource), given a memory_probe (on a GPU box leave
  it out: the tracer reads torch.cuda itself);
* the turn runs inside `tracer.request(...)`, which records the request's GPU memory and RSS
  before and after, so dslogs can tell which session's requests leave memory behind even when
  every session moves the same per-process counters;
* `tracer.tokenize` / `tracer.generate` replace the hand-timed calls: prefill and decode split,
  params, reasoning_len, and §3.2's greedy fallback as `oom_fallback=` (where the fault plan
  asks for it: without it the OOM reaches Streamlit, as it would);
* the article's remaining `log_event` calls stay as they were: `from dslogs_collector import log_event`
  reads the session id from st.session_state like the article's did.

Run it by hand: `PYTHONPATH=. streamlit run tests/e2e/apps/streamlit_dslogs/app.py`.
"""

import os
import time
import uuid

import streamlit as st

from dslogs_collector import Tracer, log_event, set_default_tracer
from tests.e2e.apps import fake_gpu
from tests.e2e.apps.faults import ACTIVATION_MB, Plan
from tests.e2e.apps.tiny_r1 import load_model, load_tokenizer, parse_thinking_chain


@st.cache_resource
def load():
    return load_model(), load_tokenizer()


@st.cache_resource
def get_tracer():
    tracer = Tracer(os.environ.get("DSLOGS_LOG_DIR", "./logs"), memory_probe=fake_gpu.process_gpu().probe)
    set_default_tracer(tracer)  # log_event writes here too
    return tracer


@st.cache_resource
def response_cache():
    return []  # the host leak: a per-process cache nobody trims


model, tokenizer = load()
tracer = get_tracer()
cuda = fake_gpu.process_gpu()  # torch.cuda on a GPU box
plan = Plan.from_env()

if "session_id" not in st.session_state:
    st.session_state.session_id = str(uuid.uuid4())
    st.session_state.generate_ms = {}  # the app's own timing, per request id
sid = st.session_state.session_id

if prompt := st.chat_input("考考 DeepSeek R1..."):
    fault = plan.for_message(prompt)
    rid = str(uuid.uuid4())
    kwargs = dict(max_new_tokens=fault.max_new_tokens, pad_token_id=tokenizer.eos_token_id)
    if fault.num_beams > 1:
        kwargs.update(num_beams=fault.num_beams, do_sample=False)
    else:
        kwargs.update(temperature=0.6, top_p=0.95, do_sample=True)
    with tracer.request(session_id=sid, request_id=rid):
        inputs = tracer.tokenize(tokenizer, prompt, session_id=sid, request_id=rid, device=model.device)
        with cuda.activations(ACTIVATION_MB):
            t0 = time.perf_counter()
            try:
                outputs = tracer.generate(model, inputs, session_id=sid, request_id=rid, tokenizer=tokenizer,
                                          oom_fallback=fault.oom_fallback, **kwargs)
            finally:
                st.session_state.generate_ms[rid] = (time.perf_counter() - t0) * 1000
        response = tokenizer.decode(outputs[0], skip_special_tokens=True)
        formatted = parse_thinking_chain(response)
        log_event("format", duration_ms=-1)
        st.chat_message("assistant").write(formatted)
        if fault.gpu_leak_mb:  # article 003 §4.1's cause: outputs kept in session state
            st.session_state.setdefault("last_outputs", []).append(outputs)
            cuda.keep(fault.gpu_leak_mb)
        else:  # §4.1's fix
            del outputs
            cuda.empty_cache()
        if fault.host_leak_mb:
            response_cache().append(b"\x01" * (fault.host_leak_mb * 1024 * 1024))
