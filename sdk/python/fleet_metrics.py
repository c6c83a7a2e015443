"""fleet_metrics: report training progress to the FleetJob sidecar (Python 3 standard library only).

    import fleet_metrics

    for step, batch in enumerate(loader, 1):
        loss = train_step(batch)
        fleet_metrics.report(step=step, samples=len(batch), loss=loss, lr=scheduler.lr)

or, timing each step:

    with fleet_metrics.timed_step(step=step, samples=len(batch)) as s:
        s.loss = train_step(batch)

Fields: step (the step number), steps (steps this report covers, when there is no step number),
epoch, loss, step_time (seconds one step took), samples (samples in the reported steps),
samples_per_second, total_steps (the training's total steps: the job's percent done and ETA); any
other keyword is a custom scalar (a name of 1-64 characters from A-Z a-z 0-9 _ . : / -). Numbers only. The sidecar exports them as fleet_training_* metrics
(docs/sidecar.md).

Where reports go: FLEET_METRICS_ENDPOINT, which the FleetJob operator sets in the pod:

    udp://127.0.0.1:PORT      one datagram per report: never blocks (the choice for hot loops; a
                              full receive buffer, hundreds of reports behind, drops them)
    unix:///path/to/socket    a Unix datagram socket in a volume the sidecar shares; the kernel
                              queues only ~10 datagrams (net.unix.max_dgram_qlen), so a report
                              waits up to 200 ms for room rather than being dropped
    http://127.0.0.1:PORT     POST /v1/report; waits for the answer (1 s timeout)

Unset (a script run outside a FleetJob), reports go nowhere. The rank is PADDLE_TRAINER_ID when the
launcher set it, else the sidecar's own. report() never raises because of the transport: a report
that cannot be sent is counted in Reporter.errors (bad arguments do raise, at once).
"""

import math
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request

__all__ = ["Reporter", "report", "timed_step", "default_reporter"]

ENV_ENDPOINT = "FLEET_METRICS_ENDPOINT"
MAX_DATAGRAM = 4096  # the sidecar drops longer datagrams

_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,64}$")
_FIELDS = ("step", "steps", "epoch", "loss", "step_time", "samples", "samples_per_second", "total_steps", "rank")
_COUNTS = ("step", "steps", "epoch", "total_steps", "rank")


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        # numpy / paddle scalars and 1-element arrays: their float(), if they have one
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError("fleet_metrics: %s must be a number, got %r" % (name, value)) from None
    if name in _COUNTS:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError("fleet_metrics: %s must be a whole number, got %r" % (name, value))
            value = int(value)
        if value < 0:
            raise ValueError("fleet_metrics: %s must be >= 0, got %r" % (name, value))
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def format_report(fields):
    """The text protocol line for a dict of fields: "step=12 loss=0.53 acc=0.91"."""
    parts = []
    for name, value in fields.items():
        if value is None:
            continue
        if name not in _FIELDS and not _NAME.match(name):
            raise ValueError("fleet_metrics: bad name %r (1-64 of A-Z a-z 0-9 _ . : / -)" % (name,))
        parts.append("%s=%s" % (name, _number(name, value)))
    return " ".join(parts)


class Reporter:
    """Sends step reports to one endpoint. Thread-safe."""

    def __init__(self, endpoint=None, rank=None, timeout=1.0, unix_wait=0.2):
        if endpoint is None:
            endpoint = os.environ.get(ENV_ENDPOINT, "")
        if rank is None:
            trainer_id = os.environ.get("PADDLE_TRAINER_ID", "")
            rank = int(trainer_id) if trainer_id.isdigit() else None
        self.endpoint = endpoint
        self.rank = rank
        self.timeout = timeout
        self.sent = 0
        self.errors = 0
        self.last_error = None
        self._lock = threading.Lock()
        self._sock = None
        self._address = None
        self._url = None
        if not endpoint:
            self._kind = None
        elif endpoint.startswith("udp://"):
            host, _, port = endpoint[len("udp://"):].rpartition(":")
            host = host.strip("[]")
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self._kind = "udp"
            self._address = (host, int(port))
            self._sock = socket.socket(family, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        elif endpoint.startswith("unix://"):
            self._kind = "unix"
            self._address = endpoint[len("unix://"):]
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.settimeout(unix_wait)
        elif endpoint.startswith("http://"):
            self._kind = "http"
            self._url = endpoint.rstrip("/") + "/v1/report"
        else:
            raise ValueError("fleet_metrics: %s=%r: expected udp://HOST:PORT, unix:///PATH or http://HOST:PORT"
                             % (ENV_ENDPOINT, endpoint))

    @property
    def enabled(self):
        return self._kind is not None

    def report(self, step=None, *, steps=None, epoch=None, loss=None, step_time=None, samples=None,
               samples_per_second=None, total_steps=None, **scalars):
        """Reports one step (or `steps` steps). Returns True when it was handed to the transport."""
        fields = {"step": step, "steps": steps, "epoch": epoch, "loss": loss, "step_time": step_time,
                  "samples": samples, "samples_per_second": samples_per_second, "total_steps": total_steps}
        if self.rank is not None:
            fields["rank"] = self.rank
        for name in scalars:
            if name in _FIELDS:
                raise ValueError("fleet_metrics: %s is a field, not a scalar" % name)
        fields.update(scalars)
        line = format_report(fields)  # bad arguments raise here, even when disabled
        if not self._kind or not line:
            return False
        data = line.encode()
        if len(data) > MAX_DATAGRAM:
            return self._failed("report of %d bytes is over %d" % (len(data), MAX_DATAGRAM))
        try:
            if self._kind == "http":
                request = urllib.request.Request(self._url, data=data, method="POST",
                                                 headers={"Content-Type": "text/plain"})
                with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                    answer.read()
            else:
                self._sock.sendto(data, self._address)
        except (OSError, urllib.error.URLError) as e:  # nothing listens, buffer full, refused, ...
            return self._failed(str(e))
        with self._lock:
            self.sent += 1
        return True

    def _failed(self, why):
        with self._lock:
            self.errors += 1
            self.last_error = why
        return False

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._kind = None


class _TimedStep:
    def __init__(self, reporter, fields):
        self._reporter, self._fields = reporter, fields
        self.loss = None
        self.scalars = {}

    def __enter__(self):
        self._start = time.perf_counter()
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:  # a step that raised is not a step
            fields = dict(self._fields)
            fields.setdefault("step_time", time.perf_counter() - self._start)
            if self.loss is not None:
                fields["loss"] = self.loss
            fields.update(self.scalars)
            self._reporter.report(**fields)
        return False


_default = None
_default_lock = threading.Lock()


def default_reporter():
    """The process's Reporter, for FLEET_METRICS_ENDPOINT (made on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Reporter()
        return _default


def report(step=None, **fields):
    """Reports a step through the default reporter; see Reporter.report."""
    return default_reporter().report(step, **fields)


def timed_step(step=None, reporter=None, **fields):
    """A context manager reporting one step with its step_time (and .loss / .scalars set inside)."""
    return _TimedStep(reporter or default_reporter(), dict(fields, step=step))
