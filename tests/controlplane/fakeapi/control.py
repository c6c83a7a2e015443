"""The test control API (/fake/v1, mixed into Handler): faults (latency, failures, dropped and
expired watches), tokens, the request log, configuration, pod outcomes and logs, state, seeding."""

import threading

from .errors import ApiError


FAULT_KEYS = {"latencyMs", "failNext", "code", "retryAfter", "match", "dropWatches", "expireWatches", "compact",
              "truncateNext", "abort", "garbageNext", "hugeNext", "bytes", "wrongContentTypeNext", "tokens",
              "reset"}
CONFIG_KEYS = {"kubelet", "runDelayMs", "terminationDelayMs", "bookmarkIntervalMs", "probeReadyDefault",
               "watchCacheSize", "podNetwork", "validateGroups", "kueue"}


class Faults:
    def __init__(self):
        self.lock = threading.Lock()
        self.latency_ms = 0
        self.rules = []       # dicts: kind, remaining, method, prefix, code, retryAfter, bytes, abort

    def add(self, body):
        with self.lock:
            if body.get("reset"):
                self.latency_ms = 0
                self.rules = []
            if "latencyMs" in body:
                self.latency_ms = max(0, int(body["latencyMs"]))
            method, prefix = "*", "/"
            if body.get("match"):
                parts = str(body["match"]).split(None, 1)
                if len(parts) == 2:
                    method, prefix = parts[0].upper(), parts[1]
                elif parts[0].startswith("/"):
                    prefix = parts[0]
                else:
                    method = parts[0].upper()
            for key, kind in (("failNext", "fail"), ("truncateNext", "truncate"), ("garbageNext", "garbage"),
                              ("hugeNext", "huge"), ("wrongContentTypeNext", "wrongct")):
                if int(body.get(key, 0) or 0) > 0:
                    code = int(body.get("code", 500))
                    if kind == "fail" and not 400 <= code <= 599:
                        raise ApiError.bad_request("code must be 4xx or 5xx")
                    self.rules.append({"kind": kind, "remaining": int(body[key]), "method": method,
                                       "prefix": prefix, "code": code, "retryAfter": body.get("retryAfter"),
                                       "bytes": int(body.get("bytes", 8 * 1024 * 1024)),
                                       "abort": bool(body.get("abort"))})

    def take(self, method, path, is_watch):
        with self.lock:
            for r in self.rules:
                if r["remaining"] <= 0:
                    continue
                m = r["method"]
                if m == "WATCH":
                    if not is_watch:
                        continue
                elif m != "*" and m != method:
                    continue
                if not path.startswith(r["prefix"]):
                    continue
                r["remaining"] -= 1
                rule = dict(r)
                self.rules = [x for x in self.rules if x["remaining"] > 0]
                return rule
        return None

    def state(self):
        with self.lock:
            return {"latencyMs": self.latency_ms, "rules": [dict(r) for r in self.rules]}


class ControlApi:
    """The /fake/v1 requests; part of Handler."""

    @staticmethod
    def _known_keys(body, known):
        unknown = sorted(set(body) - known)
        if unknown:
            raise ApiError.bad_request("unknown keys %s (known: %s)" % (unknown, sorted(known)))

    def _kueue(self, body):
        """GET: the stand-in's state once its loop has seen every change so far (tests wait on
        it); POST {"action": "evict", "namespace", "name", "reason", "message"?}: Kueue's
        eviction of an admitted workload (e.g. reason PodsReadyTimeout)."""
        kueue = self.fake.kueue
        if self.command == "POST":
            self._known_keys(body, {"action", "namespace", "name", "reason", "message"})
            if body.get("action") != "evict":
                raise ApiError.bad_request("unknown action %r (known: evict)" % (body.get("action"),))
            kueue.settle()
            return self.send_body(200, kueue.evict(body.get("namespace") or "default", body.get("name"),
                                                   body.get("reason"), body.get("message")))
        return self.send_body(200, kueue.state())

    def control(self, path, raw):
        fake = self.fake
        parts = [p for p in path.split("/") if p][2:]
        try:
            body = self.json_body(raw) or {}
            if not isinstance(body, dict):
                raise ApiError.bad_request("body must be a JSON object")
            m = self.command
            if parts == ["faults"]:
                if m == "POST":
                    self._known_keys(body, FAULT_KEYS)
                    if "tokens" in body:
                        fake.set_tokens(body["tokens"])
                    fake.faults.add(body)
                    if body.get("compact"):
                        fake.store.compact()
                    if body.get("dropWatches"):
                        fake.drop_watches()
                    if body.get("expireWatches"):
                        fake.expire_watches()
                return self.send_body(200, dict(fake.faults.state(), tokens=sorted(fake.tokens)))
            if parts == ["tokens"] and m == "POST":
                fake.set_tokens(body.get("tokens") or [])
                return self.send_body(200, {"tokens": sorted(fake.tokens)})
            if parts == ["requests"]:
                with fake.req_lock:
                    fake.req_lock.wait_for(lambda: fake.in_flight == 0, timeout=2.0)
                    if m == "DELETE":
                        fake.requests.clear()
                        return self.send_body(200, {"requests": []})
                    return self.send_body(200, {"requests": list(fake.requests)})
            if parts == ["config"]:
                if m == "POST":
                    self._known_keys(body, CONFIG_KEYS)
                    fake.configure(body)
                return self.send_body(200, fake.config())
            if parts == ["state"]:
                with fake.store.lock:
                    return self.send_body(200, {
                        "resourceVersion": str(fake.store.rv), "watches": len(fake.store.watchers),
                        "objects": {k: len(v) for k, v in fake.store.objects.items() if v}})
            if parts == ["kueue"]:
                return self._kueue(body)
            if len(parts) == 2 and parts[0] == "nodes" and m == "POST":
                return self.send_body(200, fake.kubelet.set_node(parts[1], body))
            if parts == ["seed"] and m == "POST":
                return self.send_body(200, fake.seed(body))
            if len(parts) in (4, 5) and parts[0] == "namespaces" and parts[2] == "pods" and m == "POST":
                ns, name = parts[1], parts[3]
                if len(parts) == 4:
                    pod = fake.kubelet.action(ns, name, body)
                    return self.send_body(200, pod)
                if parts[4] == "log":
                    fake.append_log(ns, name, body)
                    return self.send_body(200, {"kind": "Status", "status": "Success"})
            raise ApiError.path_not_found()
        except ApiError as e:
            self.send_error_status(e)
        except (ValueError, TypeError, KeyError) as e:
            self.send_error_status(ApiError.bad_request("bad control request: %r" % (e,)))
