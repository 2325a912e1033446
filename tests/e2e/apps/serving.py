"""What every driver of a served app needs: a free local port, and a gradio_client that waits for
a busy server as long as the call itself may.

gradio_client posts each call to ``/queue/join`` through httpx with httpx's default 5 s timeout.
On a loaded box (CI's two workers, 16 client threads, the model generating on the same cores)
the server can take longer to answer that post: the call then fails on the client although the
server took it, and the test sees an error the app never raised."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def patient_client(url: str, timeout_s: float):
    """A ``gradio_client.Client`` on ``url`` whose HTTP requests wait up to ``timeout_s``."""
    import gradio_client

    return gradio_client.Client(url, verbose=False, download_files=False, httpx_kwargs={"timeout": timeout_s})
