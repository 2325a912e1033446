# utils/logger.py
# Article 003 §2.2's logger, copied as printed. The one addition is `import streamlit as st`
# (marked below): the printed module uses `st` without importing it. Its lines are the legacy
# seed format dslogs reads as-is (its `legacy` format): no `v`, a naive local `timestamp`, -1 for
# "not measured".
import json
import os  # noqa: F401 - as printed
import time  # noqa: F401 - as printed
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import streamlit as st  # added: missing from the printed module

LOG_DIR = Path("./logs")
LOG_DIR.mkdir(exist_ok=True)
_executor = ThreadPoolExecutor(max_workers=2)


def _write_log_entry(entry: dict):
    date_str = datetime.now().strftime("%Y%m%d")
    log_file = LOG_DIR / f"ds15b_{date_str}.jsonl"
    try:
        with open(log_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")
    except Exception as e:
        # 极端情况下降级为print，确保不崩主线程
        print(f"[LOG FALLBACK] {e}")


def log_event(stage: str, duration_ms: float = -1, **kwargs):
    entry = {
        "session_id": st.session_state.get("session_id", "unknown"),
        "timestamp": datetime.now().isoformat(timespec="milliseconds"),
        "stage": stage,
        "duration_ms": round(duration_ms, 2),
        **kwargs
    }
    _executor.submit(_write_log_entry, entry)
