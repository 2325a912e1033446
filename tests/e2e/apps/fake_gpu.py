"""GPU memory as torch reports it, for a CI box with no GPU.

``torch.cuda.memory_reserved()`` / ``memory_allocated()`` are per *process*: every session the
process serves moves the same two numbers. ``FakeCuda`` keeps those two process-wide counters
and the app tells it what a real model would have allocated:

* ``with gpu.activations(mb):`` a request's transient tensors (KV cache, logits). Allocated
  rises for the duration; reserved rises to fit (the caching allocator) and stays there.
* ``gpu.keep(mb)``: tensors that outlive the request (article 003 §4.1's leak: outputs kept in
  session state). Allocated and reserved both keep the rise.
* ``gpu.empty_cache()``: reserved falls back to what is allocated (article 003 §4.1's fix).

So a healthy request raises reserved only while it runs; a leaky one leaves memory behind that
every later snapshot, of any session, sees. ``gpu.probe`` is the Tracer's ``memory_probe``.
The API mirrors ``torch.cuda`` so an app can write ``cuda = torch.cuda if torch.cuda.is_available()
else FakeCuda()`` and keep article 003's ``log_gpu_memory`` unchanged.
"""

from __future__ import annotations

import contextlib
import threading

MB = 1024 * 1024


class FakeCuda:
    device = "cuda:0"

    def __init__(self, weights_mb: float = 3400.0):
        self._lock = threading.Lock()
        self.allocated_mb = weights_mb
        self.reserved_mb = weights_mb

    # -- torch.cuda's names ---------------------------------------------------------------
    def is_available(self) -> bool:
        return True

    def memory_allocated(self, device=None) -> int:
        return int(self.allocated_mb * MB)

    def memory_reserved(self, device=None) -> int:
        return int(self.reserved_mb * MB)

    def empty_cache(self) -> None:
        with self._lock:
            self.reserved_mb = self.allocated_mb

    # -- what the app tells it ------------------------------------------------------------
    @contextlib.contextmanager
    def activations(self, mb: float):
        with self._lock:
            self.allocated_mb += mb
            self.reserved_mb = max(self.reserved_mb, self.allocated_mb)
        try:
            yield
        finally:
            with self._lock:
                self.allocated_mb -= mb

    def keep(self, mb: float) -> None:
        with self._lock:
            self.allocated_mb += mb
            self.reserved_mb = max(self.reserved_mb, self.allocated_mb)

    def probe(self) -> dict:
        """The Tracer's ``memory_probe``: this process's reserved and allocated MiB now, on the
        device the memory would live on (request lines then say cuda:0, not the CPU the tiny
        model really runs on)."""
        with self._lock:
            return {"reserved_mb": round(self.reserved_mb, 1), "allocated_mb": round(self.allocated_mb, 1),
                    "device": self.device}


_PROCESS_GPU: FakeCuda | None = None


def process_gpu() -> FakeCuda:
    """This process's (fake) GPU: one per process, as torch.cuda is. Streamlit reruns the
    script for every message, so the counters live here, not in the script."""
    global _PROCESS_GPU
    if _PROCESS_GPU is None:
        _PROCESS_GPU = FakeCuda()
    return _PROCESS_GPU


def reset_process_gpu() -> FakeCuda:
    """A fresh process GPU (tests: as if the server had restarted)."""
    global _PROCESS_GPU
    _PROCESS_GPU = FakeCuda()
    return _PROCESS_GPU
