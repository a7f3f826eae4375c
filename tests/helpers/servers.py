"""A server's /metrics made by hand, for the serving tests that play a vLLM server without one
(tests/serving/test_serving_units.py, test_cluster_watch.py)."""

from __future__ import annotations

import http.server


class MetricsHandler(http.server.BaseHTTPRequestHandler):
    """Answers every GET with `body`, Prometheus text: subclass it with the text to serve."""
    body = ""

    def do_GET(self):
        data = self.body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass
