"""Starts real mlaserve servers (the built-in tiny model, dummy weights, CPU) for the e2e tests."""
import os
import signal
import socket
import subprocess
import time

import pytest
import requests

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("MLASERVE_BINARY", os.path.join(ROOT, "build", "mlaserve"))
TOKENIZER = os.environ.get("MLASERVE_TOKENIZER_DIR", os.path.join(ROOT, "..", "shared", "tokenizers", "deepseek-v3"))
MODEL = "deepseek-v3-tiny"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *extra, startup_timeout=180):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = f"/tmp/mlaserve_e2e_{self.port}.log"
        cmd = [BINARY, "serve", "--model", MODEL, "--load-format", "dummy", "--tokenizer-path", TOKENIZER,
               "--port", str(self.port), "--random-seed", "7", *extra]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + startup_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {open(self.log_path).read()[-3000:]}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("server did not start in time")

    def get(self, path, **kw):
        return requests.get(self.url + path, timeout=kw.pop("timeout", 60), **kw)

    def post(self, path, **kw):
        return requests.post(self.url + path, timeout=kw.pop("timeout", 300), **kw)

    def info(self):
        return self.get("/get_server_info").json()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


@pytest.fixture(scope="session")
def server():
    s = Server("--max-total-tokens", "40000")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def plain_server():
    """No radix cache, small prefill chunks, paged KV, no overlap schedule, mixed prefill + decode
    batches, shared experts apart from the routed ones: must give the same greedy outputs."""
    s = Server("--max-total-tokens", "40000", "--disable-radix-cache", "--chunked-prefill-size", "7", "--page-size", "4",
               "--disable-overlap-schedule", "--enable-mixed-chunk", "--disable-shared-experts-fusion")
    yield s
    s.stop()


def wait_idle(server, timeout=30):
    """Waits until no request runs; returns the server info."""
    deadline = time.time() + timeout
    while True:
        info = server.info()
        if info["num_running_requests"] == 0 and info["num_waiting_requests"] == 0:
            return info
        if time.time() > deadline:
            return info
        time.sleep(0.2)
