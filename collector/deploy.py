"""The deploy record: what the service runs with, written by the tracer itself.

A ``deploy`` line is written when a tracer starts (and in a forked child) and again the first
time ``Tracer.generate`` / ``stream_generate`` sees a model. Its ``config`` field is a JSON object
of flat keys, so the analyzer can say what changed between two deploys key by key:

- ``python``, ``pkg.<name>``: versions of python, torch, transformers, gradio, streamlit, vllm,
  accelerate and dslogs-collector, from ``importlib.metadata`` (which reads the installed
  metadata and imports nothing; a module already imported gives its ``__version__``);
- ``torch.threads``, ``device``, ``dtype``;
- ``model.name``, ``model.config_hash`` (sha256 of the model config), ``model.revision``,
  ``model.attn_implementation``;
- ``generate.<key>``: the model's ``generation_config`` (use_cache, num_beams, max_new_tokens,
  ...), and ``call.<key>``: what the app passed to its first generate call for the same keys;
- ``git.commit`` / ``git.branch`` of the app's repository, read from ``.git`` (HEAD, loose refs,
  packed-refs; git is never run).

``label`` is ``$DSLOGS_DEPLOY``, else OpenTelemetry's ``service.version`` (``$OTEL_SERVICE_VERSION``
or ``$OTEL_RESOURCE_ATTRIBUTES``). No prompt or answer text is read. Everything but the one
set lookup per generate call runs on a short-lived daemon thread, and nothing raises.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time

PACKAGES = ("torch", "transformers", "gradio", "streamlit", "vllm", "accelerate", "dslogs-collector", "dslogs")
# generate() settings recorded from generation_config and from the app's first call
GENERATE_KEYS = ("use_cache", "num_beams", "max_new_tokens", "max_length", "do_sample", "temperature",
                 "top_p", "top_k", "repetition_penalty", "cache_implementation", "prefill_chunk_size")
ENV_LABEL = "DSLOGS_DEPLOY"
MAX_GIT_DEPTH = 32


def label_from_env(environ=os.environ) -> str | None:
    """``DSLOGS_DEPLOY``, else OTel's service.version (its own variable or the resource list)."""
    for name in (ENV_LABEL, "OTEL_SERVICE_VERSION"):
        v = (environ.get(name) or "").strip()
        if v:
            return v[:200]
    for part in (environ.get("OTEL_RESOURCE_ATTRIBUTES") or "").split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip() == "service.version" and value.strip():
            return _unquote(value.strip())[:200]
    return None


def _unquote(text: str) -> str:
    try:
        from urllib.parse import unquote

        return unquote(text)
    except Exception:
        return text


def package_versions(modules=None, metadata_lookup: bool = True) -> dict:
    """Versions of python and the packages that matter; a module already imported gives its
    ``__version__``, else (``metadata_lookup``) the installed metadata, which imports nothing."""
    modules = sys.modules if modules is None else modules
    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    metadata = None
    if metadata_lookup:
        try:
            from importlib import metadata
        except Exception:
            metadata = None
    for name in PACKAGES:
        mod = modules.get(name.replace("-", "_"))
        v = getattr(mod, "__version__", None) if mod is not None else None
        if not isinstance(v, str) and metadata is not None:
            try:
                v = metadata.version(name)
            except Exception:
                v = None
        if isinstance(v, str):
            out[f"pkg.{name}"] = v
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(1 << 20)
    except OSError:
        return None


def find_git_dir(start: str) -> tuple[str, str] | None:
    """(git dir, common dir) of the repository holding ``start``: a ``.git`` folder, or a
    ``.git`` file pointing at a worktree's folder (``gitdir:``), whose refs live in ``commondir``."""
    d = os.path.abspath(start)
    for _ in range(MAX_GIT_DEPTH):
        cand = os.path.join(d, ".git")
        if os.path.isdir(cand):
            git_dir = cand
        elif os.path.isfile(cand):
            text = (_read(cand) or "").strip()
            if not text.startswith("gitdir:"):
                return None
            git_dir = os.path.normpath(os.path.join(d, text[len("gitdir:"):].strip()))
        else:
            parent = os.path.dirname(d)
            if parent == d:
                return None
            d = parent
            continue
        common = (_read(os.path.join(git_dir, "commondir")) or "").strip()
        common_dir = os.path.normpath(os.path.join(git_dir, common)) if common else git_dir
        return git_dir, common_dir
    return None


def git_info(start: str) -> dict:
    """``git.commit`` (and ``git.branch``) of the repository at or above ``start``, from files."""
    found = find_git_dir(start)
    if not found:
        return {}
    git_dir, common = found
    head = (_read(os.path.join(git_dir, "HEAD")) or "").strip()
    if not head:
        return {}
    if not head.startswith("ref:"):
        return {"git.commit": head[:40]} if _is_sha(head) else {}
    ref = head[4:].strip()
    out = {"git.branch": ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ref}
    for base in (git_dir, common):
        sha = (_read(os.path.join(base, *ref.split("/"))) or "").strip()
        if _is_sha(sha):
            out["git.commit"] = sha[:40]
            return out
    for line in (_read(os.path.join(common, "packed-refs")) or "").splitlines():
        sha, _, name = line.strip().partition(" ")
        if name == ref and _is_sha(sha):
            out["git.commit"] = sha[:40]
            break
    return out


def _is_sha(text: str) -> bool:
    return len(text) >= 40 and all(c in "0123456789abcdef" for c in text[:40])


def _app_dir() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) if isinstance(path, str) else os.getcwd()


def start_config(metadata_lookup: bool = True) -> dict:
    cfg = package_versions(metadata_lookup=metadata_lookup)
    git = git_info(_app_dir()) or git_info(os.getcwd())
    cfg.update(git)
    cfg.update(_torch_config())
    return cfg


def _torch_config() -> dict:
    torch = sys.modules.get("torch")  # the app's: never imported here
    out = {}
    try:
        if torch is not None:
            out["torch.threads"] = int(torch.get_num_threads())
    except Exception:
        pass
    return out


def _plain(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)[:200]


def model_config(model, call_kwargs: dict) -> dict:
    """What a deploy runs its model with (names, hashes, settings; never tensors or text)."""
    out = {}
    cfg = getattr(model, "config", None)
    name = getattr(model, "name_or_path", None) or getattr(cfg, "_name_or_path", None) or getattr(cfg, "name_or_path", None)
    out["model.name"] = str(name)[:300] if name else type(model).__name__
    out["model.class"] = type(model).__name__
    if cfg is not None:
        try:
            d = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(vars(cfg))
            d = {k: v for k, v in d.items() if not str(k).startswith("_") and k != "transformers_version"}
            text = json.dumps(d, sort_keys=True, default=str)
            out["model.config_hash"] = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        except Exception:
            pass
        for key, attr in (("model.revision", "_commit_hash"), ("model.attn_implementation", "_attn_implementation")):
            v = getattr(cfg, attr, None)
            if v:
                out[key] = str(v)[:100]
    try:
        p = next(model.parameters())
        out["device"] = str(p.device)
        out["dtype"] = str(p.dtype).replace("torch.", "")
    except Exception:
        dev = getattr(model, "device", None)
        if dev is not None:
            out["device"] = str(dev)
    gc = call_kwargs.get("generation_config") or getattr(model, "generation_config", None)
    for key in GENERATE_KEYS:
        v = getattr(gc, key, None) if gc is not None else None
        if v is not None:
            out[f"generate.{key}"] = _plain(v)
        if key in call_kwargs and call_kwargs[key] is not None:
            out[f"call.{key}"] = _plain(call_kwargs[key])
    out.update(_torch_config())
    return out


class Deploy:
    """One tracer's deploy identity and the models it has recorded."""

    def __init__(self, tracer):
        self.tracer = tracer
        self.id = f"{os.getpid():x}-{time.time_ns():x}"
        self.label = label_from_env()
        self.seen: set = set()  # id() of models recorded
        self.base: dict = {}

    def start(self) -> None:
        """The start record, queued now (first in the process's lines): what is known without
        reading package metadata (the modules already imported, .git, torch's threads)."""
        try:
            self.base = start_config(metadata_lookup=False)
            self._queue(self.tracer._clock(), dict(self.base, trigger="start"))
        except Exception:
            pass

    def saw_model(self, model, call_kwargs: dict) -> None:
        """First generate call with ``model``: record it (on a thread; the call goes on)."""
        key = id(model)
        if key in self.seen:
            return
        self.seen.add(key)
        t0 = self.tracer._clock()
        kwargs = {k: call_kwargs.get(k) for k in (*GENERATE_KEYS, "generation_config") if k in call_kwargs}
        self._spawn(lambda: self._write(t0, "model", (model, kwargs)))

    def _spawn(self, fn) -> None:
        try:
            threading.Thread(target=fn, name="dslogs-deploy", daemon=True).start()
        except Exception:
            pass

    def _write(self, t0: float, trigger: str, model_call) -> None:
        try:
            cfg = start_config()  # the start record's keys, and the packages imported since
            if model_call is not None:
                cfg.update(model_config(*model_call))
            cfg["trigger"] = trigger
            if self.tracer._closed:  # a tracer closed at once: nothing to record, nothing dropped
                return
            self._queue(t0, cfg)
        except Exception:
            pass

    def _queue(self, t0: float, cfg: dict) -> None:
        self.tracer.event_at(t0, "deploy", deploy_id=self.id, label=self.label,
                             config=json.dumps(cfg, sort_keys=True, ensure_ascii=False, default=str))

    def after_fork(self) -> None:
        self.id = f"{os.getpid():x}-{time.time_ns():x}"
        self.seen = set()
        self.start()
