"""Tests of fleet_metrics against in-process receivers (UDP, Unix datagram, HTTP). Run:
    python3 sdk/python/test_fleet_metrics.py
The helper against a real fleet-sidecar is tested by tests/sidecar/agent_binary_test.cc."""
import http.server
import os
import socket
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_metrics  # noqa: E402


class Receiver:
    """A datagram socket that collects what it receives."""

    def __init__(self, family, address):
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(5)

    def next(self):
        return self.sock.recv(65536).decode()

    def close(self):
        self.sock.close()


class HttpReceiver(http.server.BaseHTTPRequestHandler):
    bodies = []

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        HttpReceiver.bodies.append((self.path, self.headers.get("Content-Type"), self.rfile.read(n).decode()))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


class FleetMetricsTest(unittest.TestCase):
    def setUp(self):
        self.env = dict(os.environ)
        os.environ.pop("FLEET_METRICS_ENDPOINT", None)
        os.environ.pop("PADDLE_TRAINER_ID", None)

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.env)

    def test_udp_text_protocol(self):
        rx = Receiver(socket.AF_INET, ("127.0.0.1", 0))
        try:
            r = fleet_metrics.Reporter("udp://127.0.0.1:%d" % rx.sock.getsockname()[1])
            self.assertTrue(r.report(step=12, samples=32, loss=0.53125, acc=0.9, lr=1e-4))
            self.assertEqual(rx.next(), "step=12 loss=0.53125 samples=32 acc=0.9 lr=0.0001")
            self.assertTrue(r.report(steps=2, loss=float("nan"), step_time=0.25, epoch=3.0))
            self.assertEqual(rx.next(), "steps=2 epoch=3 loss=nan step_time=0.25")
            self.assertTrue(r.report(step=13, total_steps=1500))
            self.assertEqual(rx.next(), "step=13 total_steps=1500")
            with self.assertRaises(ValueError):
                r.report(step=14, total_steps=2.5)   # a count
            self.assertEqual((r.sent, r.errors), (3, 0))
            r.close()
        finally:
            rx.close()

    def test_rank_from_paddle_env_and_default_reporter(self):
        rx = Receiver(socket.AF_INET, ("127.0.0.1", 0))
        try:
            os.environ["FLEET_METRICS_ENDPOINT"] = "udp://127.0.0.1:%d" % rx.sock.getsockname()[1]
            os.environ["PADDLE_TRAINER_ID"] = "3"
            fleet_metrics._default = None
            self.assertTrue(fleet_metrics.report(7, loss=1.5))
            self.assertEqual(rx.next(), "step=7 loss=1.5 rank=3")
            with fleet_metrics.timed_step(step=8, samples=64) as s:
                s.loss = 0.25
                s.scalars["acc"] = 0.5
            line = rx.next()
            self.assertTrue(line.startswith("step=8 loss=0.25 step_time="), line)
            self.assertTrue(line.endswith(" samples=64 rank=3 acc=0.5"), line)
        finally:
            if fleet_metrics._default is not None:
                fleet_metrics._default.close()
            fleet_metrics._default = None
            rx.close()

    def test_unix_socket(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "metrics.sock")
            rx = Receiver(socket.AF_UNIX, path)
            try:
                r = fleet_metrics.Reporter("unix://" + path)
                self.assertTrue(r.report(step=1, loss=2.0))
                self.assertEqual(rx.next(), "step=1 loss=2.0")
                r.close()
            finally:
                rx.close()

    def test_http(self):
        server = http.server.HTTPServer(("127.0.0.1", 0), HttpReceiver)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            HttpReceiver.bodies = []
            r = fleet_metrics.Reporter("http://127.0.0.1:%d" % server.server_address[1])
            self.assertTrue(r.report(step=5, loss=0.5))
            self.assertEqual(HttpReceiver.bodies, [("/v1/report", "text/plain", "step=5 loss=0.5")])
        finally:
            server.shutdown()
            server.server_close()

    def test_disabled_without_endpoint_but_arguments_are_still_checked(self):
        r = fleet_metrics.Reporter()
        self.assertFalse(r.enabled)
        self.assertFalse(r.report(step=1, loss=0.5))
        with self.assertRaises(ValueError):
            r.report(step=1, **{"bad name": 1.0})
        with self.assertRaises(TypeError):
            r.report(step=1, loss="low")
        with self.assertRaises(ValueError):
            r.report(step=-1)
        with self.assertRaises(ValueError):
            r.report(step=1.5)
        with self.assertRaises(ValueError):
            fleet_metrics.Reporter("tcp://127.0.0.1:1")

    def test_transport_failures_are_counted_not_raised(self):
        with tempfile.TemporaryDirectory() as d:
            r = fleet_metrics.Reporter("unix://" + os.path.join(d, "nobody-listens.sock"))
            self.assertFalse(r.report(step=1, loss=0.5))
            self.assertEqual(r.errors, 1)
            self.assertTrue(r.last_error)
            r.close()
        r = fleet_metrics.Reporter("http://127.0.0.1:1", timeout=0.5)  # refused
        self.assertFalse(r.report(step=1))
        self.assertEqual(r.errors, 1)
        r = fleet_metrics.Reporter("udp://127.0.0.1:9")
        self.assertFalse(r.report(step=1, **{"s%03d" % i: 1.0 for i in range(600)}))  # over 4096 bytes
        self.assertIn("over 4096", r.last_error)
        r.close()

    def test_a_step_that_raises_is_not_reported(self):
        rx = Receiver(socket.AF_INET, ("127.0.0.1", 0))
        try:
            r = fleet_metrics.Reporter("udp://127.0.0.1:%d" % rx.sock.getsockname()[1])
            with self.assertRaises(RuntimeError):
                with fleet_metrics.timed_step(step=1, reporter=r):
                    raise RuntimeError("boom")
            self.assertEqual(r.sent, 0)
            r.close()
        finally:
            rx.close()


if __name__ == "__main__":
    unittest.main()
