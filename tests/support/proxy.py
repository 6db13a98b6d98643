"""An HTTP proxy on 127.0.0.1 in front of a local object-store server, for tests: it counts every
request by kind (the server's own view, to check ours against) and can inject faults: answer every
Nth request with 503 SlowDown, add latency, drop the connection, refuse a request with the store's own
error, or cut the network for good.

Why our own: SeaweedFS's and fake-gcs-server's logs do not classify S3 multipart or GCS resumable
requests, and neither can throttle on demand. Bounded: it serves until stopped, on loopback only.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}
SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
             b"<Message>Please reduce your request rate.</Message></Error>")
# A store that refuses a request (a bucket policy or quota changed under the job), each in its own format
ACCESS_DENIED = {"s3": ("application/xml", b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
                        b"<Message>Access Denied</Message></Error>"),
                 "gcs": ("application/json", b'{"error": {"code": 403, "message": "Access denied.", "errors": '
                         b'[{"reason": "forbidden", "message": "Access denied."}]}}')}


def s3_kind(method: str, path: str, query: dict, headers: dict) -> str:
    if "uploads" in query:
        return "CreateMultipartUpload"
    if "uploadId" in query:
        return {"PUT": "UploadPart", "POST": "CompleteMultipartUpload", "DELETE": "AbortMultipartUpload"}.get(
            method, f"{method} multipart")
    key = path.strip("/").partition("/")[2]
    if method == "GET" and (not key or "list-type" in query):
        return "ListObjects"
    return {"PUT": "PutObject", "HEAD": "HeadObject", "DELETE": "DeleteObject",
            "GET": "GetObject (ranged)" if "range" in headers else "GetObject"}.get(method, method)


def gcs_kind(method: str, path: str, query: dict, headers: dict) -> str:
    if "upload_id" in query:
        return "resumable upload chunk"
    if query.get("uploadType") == ["resumable"]:
        return "resumable upload start"
    if "uploadType" in query:
        return "simple upload"
    if method == "GET" and path.rstrip("/").endswith("/o"):
        return "list objects"
    if method == "GET":
        return "get object (ranged)" if "range" in headers else \
            ("get object" if query.get("alt") == ["media"] else "object metadata")
    return {"DELETE": "delete object"}.get(method, method)


class Proxy:
    def __init__(self, upstream: str, classify, throttle_every: int = 0, drop_every: int = 0,
                 latency: float = 0.0, cut_when: Callable[[str, str], bool] | None = None,
                 refuse_when: Callable[[str, str], bool] | None = None, store: str = "s3") -> None:
        """``cut_when(method, path)``: the first request for which it is true cuts the network to the
        server for good (that request dropped, every later one refused): a fault that strikes at an
        event of the run, not after some seconds, and leaves the server up to look at afterwards.
        ``refuse_when(method, path)``: every request for which it is true is answered 403, access denied, in
        ``store``'s format (``s3`` or ``gcs``), and not sent on."""
        self.upstream = urlsplit(upstream)
        self.classify, self.latency = classify, latency
        self.throttle_every, self.drop_every = throttle_every, drop_every
        self.counts: Counter[str] = Counter()
        self.throttled: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self._n = 0
        self._lock = threading.Lock()
        self.cut_when, self.is_cut = cut_when, threading.Event()
        self.refuse_when, self.refused, self._refusal = refuse_when, Counter[str](), ACCESS_DENIED[store]
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815 (http.server's names)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _body(self, h: BaseHTTPRequestHandler) -> bytes:
        if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while (size := int(h.rfile.readline().split(b";")[0], 16)) > 0:
                out += h.rfile.read(size)
                h.rfile.readline()
            h.rfile.readline()
            return out
        return h.rfile.read(int(h.headers.get("Content-Length", 0)))

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        try:
            self._forward(h)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True  # the client went away (a reader that stopped early)

    def _forward(self, h: BaseHTTPRequestHandler) -> None:
        body = self._body(h)
        if self.is_cut.is_set() or (self.cut_when is not None and self.cut_when(h.command, unquote(h.path))):
            self.cut()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        url = urlsplit(h.path)
        headers = {k.lower(): v for k, v in h.headers.items()}
        kind = self.classify(h.command, url.path, parse_qs(url.query, keep_blank_values=True), headers)
        with self._lock:
            self._n += 1
            n = self._n
            self.counts[kind] += 1
        if self.refuse_when is not None and self.refuse_when(h.command, unquote(h.path)):
            with self._lock:
                self.refused[kind] += 1
            self._answer(h, 403, "Forbidden", *self._refusal)
            return
        if self.latency:
            time.sleep(self.latency)
        if self.drop_every and n % self.drop_every == 0:
            with self._lock:
                self.dropped[kind] += 1
            h.close_connection = True
            h.connection.shutdown(2)
            return
        if self.throttle_every and n % self.throttle_every == 0:
            with self._lock:
                self.throttled[kind] += 1
            self._answer(h, 503, "Slow Down", "application/xml", SLOW_DOWN)
            return
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
        try:
            out = {k: v for k, v in h.headers.items() if k.lower() not in HOP | {"content-length"}}
            conn.request(h.command, h.path, body=body, headers={**out, "Content-Length": str(len(body))})
            r = conn.getresponse()
            data = r.read()
        finally:
            conn.close()
        h.send_response(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() not in HOP | {"content-length"}:
                h.send_header(k, v)
        h.send_header("Content-Length", r.getheader("Content-Length", "0") if h.command == "HEAD" else str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    @staticmethod
    def _answer(h: BaseHTTPRequestHandler, status: int, reason: str, content_type: str, body: bytes) -> None:
        h.send_response(status, reason)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def cut(self) -> None:
        """No more connections, and none of those open gets an answer (from any thread)."""
        if not self.is_cut.is_set():
            self.is_cut.set()
            threading.Thread(target=lambda: (self.server.shutdown(), self.server.server_close()), daemon=True).start()

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.throttled.clear()
            self.dropped.clear()
            self._n = 0


@contextmanager
def proxy(upstream: str, classify, **faults):
    p = Proxy(upstream, classify, **faults)
    thread = threading.Thread(target=p.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield p
    finally:
        p.server.shutdown()
        p.server.server_close()


def recording(classify):
    """The proxy's classifier, also keeping each request's (kind, object key, Range header) in order."""
    seen: list[tuple[str, str, str | None]] = []

    def kind_of(method: str, path: str, query: dict, headers: dict) -> str:
        kind = classify(method, path, query, headers)
        seen.append((kind, unquote(path).lstrip("/"), headers.get("range")))
        return kind
    return kind_of, seen
