"""Helpers of the tests that start child processes from the installed PySpark:
``spark-submit`` runs of the jobs, and Spark servers (a standalone cluster, Spark
Connect) on 127.0.0.1; and the modules of bench/ that such tests use."""

from __future__ import annotations

import importlib
import os
import socket
import sys
import time
from types import ModuleType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench_module(name: str) -> ModuleType:
    """A module of bench/ (not a package)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def spark_submit(job: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The ``spark-submit`` command of ``jobs/<job>`` in local mode, and an
    environment whose driver and workers use the test interpreter."""
    bin_dir = os.path.dirname(sys.executable)
    cmd = [os.path.join(bin_dir, "spark-submit"), "--master", "local[2]"]
    cmd += [os.path.join(ROOT, "jobs", job), *args]
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
    )
    return cmd, env


class LosingProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` (an S3 API server) that
    forwards every request and its answer, except that for the first request
    ``lose(method, path, headers)`` picks it forwards the request, lets the server
    act on it, and then closes the client's connection without the answer: a
    response lost on the network, after which the client retries.  ``log`` lists
    ``(method, path, status, lost)`` of every request, to prove the fault happened.
    """

    def __init__(self, upstream: str, lose) -> None:
        import http.client
        import http.server
        import threading
        import urllib.parse

        target = urllib.parse.urlsplit(upstream)
        proxy = self
        self.log: list[tuple[str, str, int, bool]] = []
        self.lost = False

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                conn.close()
                losing = not proxy.lost and lose(self.command, self.path, self.headers)
                proxy.log.append((self.command, self.path, answer.status, losing))
                if losing:
                    proxy.lost = True
                    self.close_connection = True  # the server acted; the answer is lost
                    return
                self.send_response_only(answer.status, answer.reason)
                # A HEAD's length is the object's, from the server; a body's is its own.
                skip = ("transfer-encoding", "connection")
                if self.command != "HEAD":
                    skip += ("content-length",)
                    self.send_header("Content-Length", str(len(data)))
                for key, value in answer.getheaders():
                    if key.lower() not in skip:
                        self.send_header(key, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
