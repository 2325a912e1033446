"""Article 003's Streamlit chat app with its own logger (utils/logger.py), assembled from the
article's snippets: §2.2 (input / tokenize / inference / format events), §3.2 (OOM caught,
greedy fallback), §4.1 (log_gpu_memory after each reply), §4.2 (CPU time and gpu_wait_pct
around generate). Its logs are the seed format; `dslogs analyze ./logs` reads them as-is.

Run it by hand: `cd tests/e2e/apps/streamlit_article003 && PYTHONPATH=../../../.. streamlit run app.py`.

Stand-ins for CI, each one line: the model is tiny_r1 (DeepSeek-R1-Distill-Qwen-1.5B on a GPU
box), `cuda` is fake_gpu's per-process counters (torch.cuda there), and the fault plan makes
chosen sessions keep their outputs (§4.1's leak) or ask for 5 beams (§3.2's OOM).
"""

import time
import uuid

import streamlit as st
import torch
from utils.logger import log_event

from tests.e2e.apps import fake_gpu
from tests.e2e.apps.faults import ACTIVATION_MB, Plan
from tests.e2e.apps.tiny_r1 import load_model, load_tokenizer, parse_thinking_chain


@st.cache_resource
def load():
    return load_model(), load_tokenizer()  # AutoModelForCausalLM / AutoTokenizer.from_pretrained(...)


model, tokenizer = load()
cuda = fake_gpu.process_gpu()  # torch.cuda on a GPU box
plan = Plan.from_env()


def log_gpu_memory():
    if cuda.is_available():
        allocated = cuda.memory_allocated() / 1024**2
        reserved = cuda.memory_reserved() / 1024**2
        log_event("gpu_memory", kv_cache_size_mb=allocated, reserved_mb=reserved)


# 对话开始前生成session_id
if "session_id" not in st.session_state:
    st.session_state.session_id = str(uuid.uuid4())

# 用户点击发送后
if prompt := st.chat_input("考考 DeepSeek R1..."):
    fault = plan.for_message(prompt)
    # 记录输入阶段
    log_event("input", input_len=len(prompt))
    # 分词耗时埋点
    start_time = time.time()
    inputs = tokenizer(prompt, return_tensors="pt").to(model.device)
    tokenize_time = (time.time() - start_time) * 1000
    log_event("tokenize", duration_ms=tokenize_time, input_len=inputs.input_ids.shape[1])
    # 推理阶段（含prefill + decode）
    start_time = time.time()
    start_cpu = time.process_time()
    start_perf = time.perf_counter()
    with cuda.activations(ACTIVATION_MB):
        try:
            outputs = model.generate(
                **inputs, max_new_tokens=fault.max_new_tokens, num_beams=fault.num_beams,
                temperature=0.6, top_p=0.95, do_sample=fault.num_beams == 1,
                pad_token_id=tokenizer.eos_token_id,
            )
        except torch.cuda.OutOfMemoryError:
            log_event("error", error_type="OOMError", error_msg="Beam search OOM, fallback to greedy")
            outputs = model.generate(**inputs, num_beams=1, do_sample=False,
                                     max_new_tokens=fault.max_new_tokens, pad_token_id=tokenizer.eos_token_id)
    end_perf = time.perf_counter()
    end_cpu = time.process_time()
    total_inference_time = (time.time() - start_time) * 1000
    cpu_time = (end_cpu - start_cpu) * 1000
    wall_time = (end_perf - start_perf) * 1000
    gpu_wait_ratio = ((wall_time - cpu_time) / wall_time) * 100 if wall_time > 0 else 0
    log_event("inference", duration_ms=total_inference_time,
              output_len=outputs.shape[1] - inputs.input_ids.shape[1],
              cpu_time_ms=round(cpu_time, 2), gpu_wait_pct=round(gpu_wait_ratio, 1))
    # 格式化输出（非计算密集，不单独计时）
    response = tokenizer.decode(outputs[0], skip_special_tokens=True)
    formatted = parse_thinking_chain(response)
    log_event("format", duration_ms=-1)
    st.chat_message("assistant").write(formatted)
    if fault.gpu_leak_mb:  # §4.1's cause: outputs kept in session state
        st.session_state.setdefault("last_outputs", []).append(outputs)
        cuda.keep(fault.gpu_leak_mb)
    else:  # §4.1's fix
        del outputs
        cuda.empty_cache()
    log_gpu_memory()  # 关键！
