"""Watches: events and watchers (selector matching, per-watch queues), opening a watch on the
store (replay from history, 410 Expired), and serving it as a chunked HTTP stream with
bookmarks and timeouts (mixed into Store and Handler)."""

import collections
import random
import threading
import time

from .errors import ApiError, status_body
from .selectors import fields_match, labels_match, parse_field_selector, parse_label_selector
from .tables import table_for
from .util import WATCH_QUEUE_LIMIT, dumps, parse_bool


class Event:
    __slots__ = ("rv", "type", "obj", "old")

    def __init__(self, rv, etype, obj, old):
        self.rv, self.type, self.obj, self.old = rv, etype, obj, old


class Watcher:
    def __init__(self, rt, key, ns, label_reqs, field_reqs, conn):
        self.rt, self.key, self.ns = rt, key, ns
        self.label_reqs, self.field_reqs = label_reqs, field_reqs
        self.cond = threading.Condition(threading.Lock())
        self.queue = collections.deque()
        self.conn = conn
        self.dropped = self.expired = self.closed = False

    def matches(self, obj):
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.ns is not None and meta.get("namespace") != self.ns:
            return False
        return labels_match(self.label_reqs, meta.get("labels")) and fields_match(self.field_reqs, self.key, obj)

    def transform(self, ev):
        cur = self.matches(ev.obj)
        if ev.type == "ADDED":
            return ("ADDED", ev.obj) if cur else None
        if ev.type == "DELETED":
            return ("DELETED", ev.obj) if cur else None
        prev = self.matches(ev.old)
        if cur and prev:
            return ("MODIFIED", ev.obj)
        if cur:
            return ("ADDED", ev.obj)
        if prev:
            old = dict(ev.old)
            old["metadata"] = dict(old["metadata"], resourceVersion=str(ev.rv))
            return ("DELETED", old)
        return None

    def offer(self, ev):
        t = self.transform(ev)
        if t is None:
            return
        with self.cond:
            if len(self.queue) >= WATCH_QUEUE_LIMIT:
                self.closed = True
            else:
                self.queue.append(t)
            self.cond.notify()

    def signal(self, **flags):
        with self.cond:
            for k, v in flags.items():
                setattr(self, k, v)
            self.cond.notify()


class StoreWatches:
    """Opening and closing watches; part of Store."""

    def open_watch(self, rt, ns, params, conn):
        label_reqs = parse_label_selector(params.get("labelSelector"))
        field_reqs = parse_field_selector(params.get("fieldSelector"), rt.storage_key)
        rvs = params.get("resourceVersion")
        send_initial = parse_bool(params.get("sendInitialEvents"))
        bookmarks = parse_bool(params.get("allowWatchBookmarks"))
        with self.lock:
            key = rt.storage_key
            w = Watcher(rt, key, ns, label_reqs, field_reqs, conn)
            initial = []
            if send_initial or rvs in (None, "", "0"):
                for _k, o in sorted(self.objects[key].items()):
                    if w.matches(o):
                        initial.append(("ADDED", o))
                if send_initial and bookmarks:
                    initial.append(("BOOKMARK", self.bookmark_object(rt, self.rv, initial_end=True)))
            else:
                try:
                    want = int(rvs)
                except ValueError:
                    raise ApiError.bad_request('invalid resource version: "%s"' % rvs)
                if want < self.compacted[key]:
                    err = status_body(410, "Expired", "too old resource version: %d (%d)"
                                      % (want, self.compacted[key]))
                    return None, [("ERROR", err)]
                for ev in self.history[key]:
                    if ev.rv > want:
                        t = w.transform(ev)
                        if t:
                            initial.append(t)
            self.watchers.add(w)
            return w, initial

    def close_watch(self, w):
        with self.lock:
            self.watchers.discard(w)

    @staticmethod
    def bookmark_object(rt, rv, initial_end=False):
        meta = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}


class HandlerWatches:
    """Serving a watch; part of Handler."""

    def _chunk(self, data):
        self._raw_write(b"%x\r\n%s\r\n" % (len(data), data))

    def serve_watch(self, rt, ns, params):
        store, fake = self.fake.store, self.fake
        try:
            timeout = int(params.get("timeoutSeconds") or 0)
        except ValueError:
            raise ApiError.bad_request("invalid timeoutSeconds")
        if timeout <= 0:   # the API server's default: spread watches' ends over [min, 2*min)
            timeout = fake.min_request_timeout * (1 + random.random())
        bookmarks = parse_bool(params.get("allowWatchBookmarks"))
        self.watch_table = self._wants_table()
        w, initial = store.open_watch(rt, ns, params, self.connection)
        mal, self.malform = self.malform, None
        if mal and mal["kind"] == "wrongct":
            if w:
                store.close_watch(w)
            self.malform = mal
            return self.send_body(200, "")
        self.status_code = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + timeout
        try:
            if mal:
                return self._send_malformed_event(rt, mal)
            for etype, obj in initial:
                self._chunk(self._event_line(rt, etype, obj))
            if w is None:   # the watch could not start (410 Expired): its error was the one event
                self._raw_write(b"0\r\n\r\n")
                return
            fake.register_watch(w)
            if self._stream_events(rt, w, deadline, bookmarks):
                self._raw_write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            if w is not None:
                store.close_watch(w)
                fake.unregister_watch(w)

    def _send_malformed_event(self, rt, mal):
        """An injected fault: one huge, truncated or garbage event, then the connection breaks."""
        kind = mal["kind"]
        if kind == "huge":
            pad = "x" * max(0, mal["bytes"] - 120)
            self._chunk(dumps({"type": "ADDED", "object": {
                "kind": rt.kind, "apiVersion": rt.api_version,
                "metadata": {"name": "huge", "annotations": {"padding": pad}}}}).encode() + b"\n")
        else:
            line = dumps({"type": "ADDED", "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                                      "metadata": {"name": "x", "resourceVersion": "1"}}})
            self._chunk(line.encode()[:len(line) // 2] if kind == "truncate"
                        else b"\x00\xff<<garbage>>{{[\n")
        self._abort()

    def _stream_events(self, rt, w, deadline, bookmarks):
        """Sends w's events (and bookmarks every fake.bookmark_interval when asked for) until the
        deadline, an expiry (410 as the last event) or a close. -> False when the client went away
        (the connection was aborted), True when the stream should end cleanly."""
        store = self.fake.store
        next_bm = time.monotonic() + self.fake.bookmark_interval
        while True:
            events, dropped, expired, closed = self._wait_for_events(w, min(deadline, next_bm) if bookmarks
                                                                     else deadline)
            if dropped:
                self._abort()
                return False
            for etype, obj in events:
                self._chunk(self._event_line(rt, etype, obj))
            if expired:
                with store.lock:
                    err = status_body(410, "Expired", "too old resource version: %d (%d)" % (store.rv, store.rv))
                self._chunk(self._event_line(rt, "ERROR", err))
                return True
            if closed:
                return True
            now = time.monotonic()
            if now >= deadline:
                return True
            if bookmarks and now >= next_bm:
                with store.lock:
                    with w.cond:   # a bookmark must not overtake an event still queued
                        rv = store.rv if not w.queue else None
                if rv is not None:
                    self._chunk(self._event_line(rt, "BOOKMARK", store.bookmark_object(rt, rv)))
                next_bm = now + self.fake.bookmark_interval

    def _wait_for_events(self, w, wake):
        """Waits until w has events or a flag, or until `wake`; marks w dropped when the client is
        gone. -> (events, dropped, expired, closed)."""
        with w.cond:
            while not (w.queue or w.dropped or w.expired or w.closed):
                now = time.monotonic()
                if now >= wake:
                    break
                if not w.cond.wait(min(wake - now, 1.0)) and self._client_gone():
                    w.dropped = True
            events = list(w.queue)
            w.queue.clear()
            return events, w.dropped, w.expired, w.closed

    def _event_line(self, rt, etype, obj):
        if etype not in ("ERROR", "BOOKMARK"):
            obj = self.out_obj(rt, obj)
            if self.watch_table:
                obj = table_for(rt, [obj], self._include(),
                                {"resourceVersion": obj["metadata"].get("resourceVersion", "")})
        return (dumps({"type": etype, "object": obj}) + "\n").encode()
