"""Background samplers: NVML ``gpu_sample``, torch ``gpu_memory``, ``process_sample``.

All optional: pynvml (package nvidia-ml-py), torch and psutil are imported here, lazily, when a
sampler is asked for. A sampler that cannot run (no package, no driver, no GPU, CUDA unused)
switches itself off with one stderr line and no exception; one that fails three times in a row
while running does the same.
"""

from __future__ import annotations

import os
import sys
import threading
import time

MB = 1024 * 1024
MAX_FAILURES = 3


def _say(msg: str) -> None:
    try:
        sys.stderr.write(f"dslogs collector: {msg}\n")
    except Exception:
        pass


class Off(Exception):
    """A sampler cannot run here; the message says why."""


# -- NVML --------------------------------------------------------------------------------------
class NvmlSampler:
    """One ``gpu_sample`` per GPU (NVML index, i.e. physical order, not CUDA_VISIBLE_DEVICES).
    ``gpu_mem_util_pct`` is NVML's memory utilisation (share of time device memory was read or
    written, nvidia-smi's utilization.memory); used/total are the memory in use."""

    name = "gpu"
    stage = "gpu_sample"

    def __init__(self):
        try:
            import pynvml
        except ImportError as e:
            raise Off("pynvml not installed (pip install nvidia-ml-py)") from e
        self.nv = pynvml
        try:
            pynvml.nvmlInit()
            n = pynvml.nvmlDeviceGetCount()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        except pynvml.NVMLError as e:
            raise Off(f"NVML not available ({e.__class__.__name__}: {e})") from e
        if not self.handles:
            raise Off("NVML sees no GPU")

    def _get(self, fn, *args):
        try:
            return fn(*args)
        except self.nv.NVMLError:  # NotSupported on some boards: the field is null
            return None

    def read(self, index: int) -> dict:
        nv, h = self.nv, self.handles[index]
        util = self._get(nv.nvmlDeviceGetUtilizationRates, h)
        mem = self._get(nv.nvmlDeviceGetMemoryInfo, h)
        power = self._get(nv.nvmlDeviceGetPowerUsage, h)  # mW
        temp = self._get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        clock = self._get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        if util is None and mem is None:
            raise nv.NVMLError(nv.NVML_ERROR_UNKNOWN)
        return {
            "gpu_index": index,
            "gpu_util_pct": None if util is None else float(util.gpu),
            "gpu_mem_util_pct": None if util is None else float(util.memory),
            "gpu_mem_used_mb": None if mem is None else round(mem.used / MB, 1),
            "gpu_mem_total_mb": None if mem is None else round(mem.total / MB, 1),
            "power_w": None if power is None else round(power / 1000.0, 1),
            "temp_c": None if temp is None else float(temp),
            "sm_clock_mhz": None if clock is None else float(clock),
        }

    def sample(self) -> list[dict]:
        return [self.read(i) for i in range(len(self.handles))]

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass


# -- torch CUDA caching allocator ----------------------------------------------------------------
def torch_memory_rows(only_device=None) -> list[dict]:
    """``gpu_memory`` fields per CUDA device now; [] when torch is not imported, CUDA is not
    available or not yet initialised (sampling must not create a CUDA context: ~300 MB)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return []
    devices = range(torch.cuda.device_count()) if only_device is None else [int(only_device)]
    rows = []
    for i in devices:
        stats = torch.cuda.memory_stats(i)
        rows.append({
            "gpu_index": i,
            "allocated_mb": round(torch.cuda.memory_allocated(i) / MB, 1),
            "reserved_mb": round(torch.cuda.memory_reserved(i) / MB, 1),
            "max_allocated_mb": round(torch.cuda.max_memory_allocated(i) / MB, 1),
            "num_ooms": int(stats.get("num_ooms", 0)),
            "num_alloc_retries": int(stats.get("num_alloc_retries", 0)),
        })
    return rows


class TorchMemorySampler:
    name = "torch"
    stage = "gpu_memory"

    def __init__(self):
        try:
            import torch
        except ImportError as e:
            raise Off("torch not installed") from e
        if not torch.cuda.is_available():
            raise Off("torch.cuda.is_available() is False (CPU build, no driver or no GPU)")

    def sample(self) -> list[dict]:
        return torch_memory_rows()

    def close(self) -> None:
        pass


# -- this process ------------------------------------------------------------------------------
class ProcessSampler:
    """RSS, CPU % (all threads; 100 = one core) and thread count of this process: psutil when
    installed, else /proc/self/status and os.times()."""

    name = "process"
    stage = "process_sample"

    def __init__(self):
        self.ps = None
        try:
            import psutil

            self.ps = psutil.Process()
            self.ps.cpu_percent(None)  # the first call only sets the baseline
        except ImportError:
            if not os.path.exists("/proc/self/status"):
                raise Off("psutil not installed and no /proc") from None
        self._t = time.monotonic()
        self._cpu = self._cpu_s()

    @staticmethod
    def _cpu_s() -> float:
        t = os.times()
        return t.user + t.system

    def sample(self) -> list[dict]:
        if self.ps is not None:
            with self.ps.oneshot():
                return [{"rss_mb": round(self.ps.memory_info().rss / MB, 1),
                         "cpu_pct": round(self.ps.cpu_percent(None), 1),
                         "threads": self.ps.num_threads()}]
        rss_kb = threads = None
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss_kb = int(line.split()[1])
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
        now, cpu = time.monotonic(), self._cpu_s()
        dt = now - self._t
        pct = (cpu - self._cpu) / dt * 100.0 if dt > 0 else None
        self._t, self._cpu = now, cpu
        return [{"rss_mb": None if rss_kb is None else round(rss_kb / 1024, 1),
                 "cpu_pct": None if pct is None else round(max(pct, 0.0), 1), "threads": threads}]

    def close(self) -> None:
        pass


SAMPLERS = {"gpu": NvmlSampler, "torch": TorchMemorySampler, "process": ProcessSampler}


class SamplerThread:
    """Runs the chosen samplers every ``interval_s`` on one daemon thread."""

    def __init__(self, tracer, which, interval_s: float):
        if which is True:
            names = list(SAMPLERS)
        elif isinstance(which, str):
            names = [which]
        else:
            names = list(which)
        self.tracer = tracer
        self.interval_s = max(0.01, float(interval_s))
        self.status: dict[str, str] = {}
        self.active = []
        for name in names:
            cls = SAMPLERS.get(name)
            if cls is None:
                self.status[name] = "unknown sampler"
                _say(f"unknown sampler {name!r} (known: {', '.join(SAMPLERS)})")
                continue
            try:
                self.active.append(cls())
                self.status[name] = "on"
            except Off as e:
                self.status[name] = f"off: {e}"
                _say(f"{name} sampler off: {e}")
            except Exception as e:  # a broken driver must not break the app
                self.status[name] = f"off: {type(e).__name__}: {e}"
                _say(f"{name} sampler off: {type(e).__name__}: {e}")
        self.failures = {s.name: 0 for s in self.active}
        self.last: dict[str, list[dict]] = {}
        self._stop = threading.Event()
        self.thread = None
        if self.active:
            self.thread = threading.Thread(target=self._run, name="dslogs-sampler", daemon=True)
            self.thread.start()

    def sample_once(self) -> None:
        for s in list(self.active):
            try:
                rows = s.sample()
                self.failures[s.name] = 0
            except Exception as e:
                self.failures[s.name] += 1
                if self.failures[s.name] >= MAX_FAILURES:
                    self.active.remove(s)
                    self.status[s.name] = f"off: {type(e).__name__}: {e}"
                    _say(f"{s.name} sampler off after {MAX_FAILURES} failures: {type(e).__name__}: {e}")
                    s.close()
                continue
            self.last[s.name] = rows
            for row in rows:
                self.tracer.event(s.stage, **row)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            if not self.active:
                break
            self._stop.wait(self.interval_s)

    def gpu_util(self, index: int) -> float | None:
        """NVML utilisation of GPU ``index`` now (for the decode event), if NVML runs."""
        for s in self.active:
            if s.name == "gpu" and 0 <= index < len(s.handles):
                try:
                    return s.read(index)["gpu_util_pct"]
                except Exception:
                    return None
        return None

    def stop(self) -> None:
        self._stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(2)
        for s in self.active:
            s.close()
