"""Samplers: process_sample for real (psutil and the /proc fallback); on this GPU-less machine
the NVML and torch samplers must switch off with one line and no exception. The NVML field
mapping is checked against a stand-in pynvml module (real NVML: bench/gpu_check.py)."""

from __future__ import annotations

import sys
import time
import types

import pytest

from dslogs_collector import Tracer
from dslogs_collector.samplers import NvmlSampler, ProcessSampler
from tests.collector_helpers import read_lines, validate


def _wait_for(tracer, tmp_path, stage, n, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tracer.flush()
        got = [e for e in read_lines(tmp_path) if e["stage"] == stage]
        if len(got) >= n:
            return got
        time.sleep(0.05)
    return [e for e in read_lines(tmp_path) if e["stage"] == stage]


def test_process_sampler_psutil(tmp_path):
    pytest.importorskip("psutil")
    t = Tracer(tmp_path, samplers=("process",), sample_interval_s=0.05)
    assert t.sampler_status == {"process": "on"}
    rows = _wait_for(t, tmp_path, "process_sample", 3)
    t.close()
    assert len(rows) >= 3
    for e in rows:
        validate(e)
        assert e["rss_mb"] > 1 and e["threads"] >= 2 and e["cpu_pct"] >= 0  # writer + sampler threads
        assert "session_id" not in e


def test_process_sampler_proc_fallback_without_psutil(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil -> ImportError
    s = ProcessSampler()
    assert s.ps is None
    # burn CPU for 50 ms of process time, not a count of iterations: /proc counts CPU in clock
    # ticks (10 ms), and 300,000 iterations took less than one tick on a fast, quiet machine
    # (cpu_pct read 0.0 in a CI run)
    x, start = 0, time.process_time()
    while time.process_time() - start < 0.05:
        x += 1
    (row,) = s.sample()
    assert row["rss_mb"] > 1 and row["threads"] >= 1 and row["cpu_pct"] > 0


def test_gpu_samplers_switch_off_without_gpu(tmp_path, capsys):
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: bench/gpu_check.py covers it")
    t = Tracer(tmp_path, samplers=True, sample_interval_s=0.05)
    status = t.sampler_status
    assert status["process"] == "on"
    assert status["gpu"].startswith("off: ") and status["torch"].startswith("off: ")
    t.event("queue", duration_ms=1.0)  # the app goes on
    _wait_for(t, tmp_path, "process_sample", 1)
    t.close()
    err = capsys.readouterr().err.splitlines()
    assert len([x for x in err if "gpu sampler off" in x]) == 1
    assert len([x for x in err if "torch sampler off" in x]) == 1
    assert not [e for e in read_lines(tmp_path) if e["stage"] in ("gpu_sample", "gpu_memory")]


def test_unknown_sampler_is_reported_not_raised(tmp_path, capsys):
    t = Tracer(tmp_path, samplers=("disk",))
    assert t.sampler_status == {"disk": "unknown sampler"}
    t.close()
    assert "unknown sampler 'disk'" in capsys.readouterr().err


class _FakeNvml(types.ModuleType):
    """pynvml's API shape (nvidia-ml-py 12+): two GPUs, power unsupported on the second."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_ERROR_UNKNOWN = 999

    class NVMLError(Exception):
        pass

    def __init__(self):
        super().__init__("pynvml")
        self.used = [1000 * 2**20, 3000 * 2**20]
        self.shutdown = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=40 + h, memory=10 + h)

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=self.used[h], total=16384 * 2**20, free=0)

    def nvmlDeviceGetPowerUsage(self, h):
        if h == 1:
            raise self.NVMLError("Not Supported")
        return 70_500  # mW

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == self.NVML_TEMPERATURE_GPU
        return 61

    def nvmlDeviceGetClockInfo(self, h, clock):
        assert clock == self.NVML_CLOCK_SM
        return 1590


def test_nvml_sampler_field_mapping(monkeypatch, tmp_path):
    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    s = NvmlSampler()
    rows = s.sample()
    assert rows[0] == {"gpu_index": 0, "gpu_util_pct": 40.0, "gpu_mem_util_pct": 10.0, "gpu_mem_used_mb": 1000.0,
                       "gpu_mem_total_mb": 16384.0, "power_w": 70.5, "temp_c": 61.0, "sm_clock_mhz": 1590.0}
    assert rows[1]["power_w"] is None and rows[1]["gpu_mem_used_mb"] == 3000.0
    t = Tracer(tmp_path, samplers=("gpu",), sample_interval_s=0.05)
    got = _wait_for(t, tmp_path, "gpu_sample", 4)
    t.close()
    assert fake.shutdown
    for e in got:
        validate(e)
    assert {e["gpu_index"] for e in got} == {0, 1}
