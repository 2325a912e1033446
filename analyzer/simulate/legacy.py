"""Article 003 §2.2's logger, line for line: what its ``log_event`` writes.

``entry = {"session_id", "timestamp": datetime.now().isoformat(timespec="milliseconds"),
"stage", "duration_ms": round(duration_ms, 2), **kwargs}`` then ``json.dumps(entry,
ensure_ascii=False)``; ``duration_ms`` defaults to -1 (unmeasured; the article logs ``format``
that way); one ``inference`` event covers prefill + decode and carries the §4.2 fields
(cpu_time_ms, gpu_wait_pct) and the §3.2 nvidia-smi reading (gpu_util_pct); ``gpu_memory``
puts ``torch.cuda.memory_allocated()/1024**2`` in ``kv_cache_size_mb`` next to ``reserved_mb``
(§4.1); ``kv_cache`` is logged before generate once a previous turn's cache exists (§4.3);
an OOM is logged as ``error``/``OOMError`` and followed by the greedy fallback (§3.2).
One file per local day, no size rotation, no gzip (the article's code has neither), and two
writer threads, so lines a few ms apart sometimes land swapped.
"""

from __future__ import annotations

import json

from dslogs.analyzer.simulate.traffic import Req, Session
from dslogs.analyzer.simulate.v1 import BadLines, V1Host, _r

SWAP_WITHIN_MS = 3
SWAP_PROBABILITY = 0.1


def _mib(mb: float) -> float:
    """What ``torch.cuda.memory_allocated() / 1024**2`` prints: whole 512-byte blocks."""
    return int(mb * 2048) * 512 / 1024**2


class LegacyBadLines(BadLines):
    legacy = True


class LegacyHost(V1Host):
    heartbeats = False

    def __init__(self, host, writer, rng, *, bad_lines: bool = False):
        super().__init__(host, writer, rng, bad_lines=False)
        self.ts = self.ts.__class__(host.offset_min, naive=True)
        self.bad_plan = LegacyBadLines(self) if bad_lines else None
        self.swaps = 0

    @staticmethod
    def _count(r: Req) -> int:
        return 5 + (r.turn > 1) + (r.error is not None)

    def _samplers(self, bstart, lo, hi, ivs, items) -> int:
        return 0

    def _request_lines(self, s: Session, r: Req):
        ts = self.ts
        sid = s.sid
        dumps = json.dumps

        def line(t: int, k: int, stage: str, duration: float = -1, **kw) -> tuple[int, str]:
            entry = {"session_id": sid, "timestamp": ts(t), "stage": stage, "duration_ms": round(duration, 2), **kw}
            return (t << 4) | k, dumps(entry, ensure_ascii=False)

        a, b, c, e, f, m = _r(r.t0), _r(r.t_tok), _r(r.t_gen), _r(r.t_dec), _r(r.t_fmt), _r(r.t_mem)
        out = [
            line(a, 0, "input", input_len=r.input_chars),
            line(b, 1, "tokenize", r.tok_ms, input_len=r.input_tokens),
        ]
        if r.turn > 1:
            out.append(line(c, 3, "kv_cache", kv_seq_len=r.kv_len, kv_cache_size_mb=_mib(self._prev_allocated)))
        if r.error:
            out.append(line(_r(r.t_oom), 5, "error", error_type="OOMError", error_msg=r.error[1]))
        out.append(
            line(
                e, 6, "inference", r.t_dec - r.t_gen, output_len=r.output_len,
                cpu_time_ms=round(r.cpu_ms, 2), gpu_wait_pct=round(r.gpu_wait, 1), gpu_util_pct=round(r.util, 1),
            )
        )  # fmt: skip
        out.append(line(f, 7, "format"))
        out.append(line(m, 9, "gpu_memory", kv_cache_size_mb=_mib(r.allocated), reserved_mb=_mib(r.reserved)))
        self._prev_allocated = r.allocated
        return out

    _prev_allocated = 0.0

    def add_session(self, s: Session) -> None:
        self._prev_allocated = s.requests[0].allocated
        super().add_session(s)

    def _post_sort(self, items: list) -> None:
        """Two writer threads: neighbours a few ms apart are sometimes written swapped."""
        random = self.rng.random
        i = 0
        n = len(items) - 1
        while i < n:
            if (items[i + 1][0] >> 4) - (items[i][0] >> 4) <= SWAP_WITHIN_MS and random() < SWAP_PROBABILITY:
                items[i], items[i + 1] = items[i + 1], items[i]
                self.swaps += 1
                i += 2
            else:
                i += 1
