"""Tests for the fake Kubernetes API server, with real clients.

Run:  /usr/bin/python3 -m unittest -v test_fake_apiserver   (from this directory)

Three layers:
  * raw HTTP (http.client) checks of API semantics the clients do not show;
  * kubectl (skipped when absent) through a temporary kubeconfig;
  * Debian's python3-kubernetes (skipped when it cannot be imported).
"""

import base64
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True       # keep the source tree clean
import fake_apiserver  # noqa: E402

try:
    import kubernetes  # noqa: F401
    from kubernetes import client as kclient, watch as kwatch
    HAVE_KUBERNETES = True
except Exception:  # pragma: no cover - depends on the machine
    HAVE_KUBERNETES = False

KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None)

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "fleetjobs.fleet.paddlepaddle.org"},
    "spec": {"group": "fleet.paddlepaddle.org", "scope": "Namespaced",
             "names": {"plural": "fleetjobs", "singular": "fleetjob", "kind": "FleetJob", "shortNames": ["fj"]},
             "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                           "additionalPrinterColumns": [
                               {"name": "Workers", "type": "integer", "jsonPath": ".spec.workers"}],
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]}}

FJ_PATH = "/apis/fleet.paddlepaddle.org/v1/namespaces/%s/fleetjobs"


def pod_body(name, labels=None, **spec):
    s = {"containers": [{"name": "main", "image": "busybox:1.36"}]}
    s.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": s}


class Raw:
    """A minimal HTTP client, independent of any Kubernetes library."""

    def __init__(self, url, token=None, ssl_context=None):
        u = urllib.parse.urlsplit(url)
        self.https, self.host, self.port = u.scheme == "https", u.hostname, u.port
        self.token, self.ctx = token, ssl_context

    def conn(self, timeout=10):
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self, extra=None):
        h = {}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(extra or {})
        return h

    def req(self, method, path, body=None, ctype="application/json", headers=None, full=False):
        c = self.conn()
        h = self.headers(headers)
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h["Content-Type"] = ctype
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw
        if full:
            return r.status, parsed, r
        return r.status, parsed

    def ok(self, method, path, body=None, ctype="application/json", expect=(200, 201)):
        st, b = self.req(method, path, body, ctype)
        if st not in expect:
            raise AssertionError("%s %s -> %s %s" % (method, path, st, b))
        return b

    def open_watch(self, path, timeout=10):
        c = self.conn(timeout)
        c.request("GET", path, headers=self.headers())
        r = c.getresponse()
        return c, r

    def watch(self, path, count=None, timeout=10, until=None):
        """Read events; -> (events, end) with end 'clean', 'abrupt', 'count' or 'until'."""
        c, r = self.open_watch(path, timeout)
        return self.read_events(c, r, count, until)

    @staticmethod
    def read_events(c, r, count=None, until=None, close=True):
        # read1() rather than readline(): readline() hides a missing terminating chunk
        events, buf = [], b""
        try:
            while True:
                while b"\n" not in buf:
                    data = r.read1(65536)
                    if not data:
                        return events, "clean"
                    buf += data
                line, buf = buf.split(b"\n", 1)
                ev = json.loads(line)
                events.append(ev)
                if count is not None and len(events) >= count:
                    return events, "count"
                if until is not None and until(ev):
                    return events, "until"
        except (http.client.IncompleteRead, ConnectionError):
            return events, "abrupt"
        finally:
            if close:
                c.close()


def wait_for(pred, timeout=10.0, interval=0.01, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(interval)


class ServerTestCase(unittest.TestCase):
    """One fake server per class; every test gets its own namespace."""
    server_kwargs = {}
    per_test_server = False

    @classmethod
    def setUpClass(cls):
        if not cls.per_test_server:
            cls.srv = fake_apiserver.FakeApiServer(**cls.server_kwargs).start()
            cls.api = Raw(cls.srv.url)

    @classmethod
    def tearDownClass(cls):
        if not cls.per_test_server:
            cls.srv.stop()

    def setUp(self):
        if self.per_test_server:
            self.srv = fake_apiserver.FakeApiServer(**self.server_kwargs).start()
            self.api = Raw(self.srv.url)
            self.addCleanup(self.srv.stop)
        self.ns = "t-" + self._testMethodName.replace("_", "-").lower()[:50].strip("-")
        st, _ = self.api.req("POST", "/api/v1/namespaces", {"metadata": {"name": self.ns}})
        self.assertIn(st, (201, 409))

    # helpers
    def pods(self, name=""):
        return "/api/v1/namespaces/%s/pods%s" % (self.ns, "/" + name if name else "")

    def cms(self, name=""):
        return "/api/v1/namespaces/%s/configmaps%s" % (self.ns, "/" + name if name else "")

    def control(self, path, body=None, method="POST"):
        st, b = self.api.req(method, "/fake/v1/" + path, body)
        self.assertEqual(st, 200, b)
        return b

    def pod_action(self, name, **body):
        return self.control("namespaces/%s/pods/%s" % (self.ns, name), body)

    def running(self, name):
        def check():
            st, p = self.api.req("GET", self.pods(name))
            return p if st == 200 and p["status"].get("phase") == "Running" else None
        return wait_for(check, what="pod %s Running" % name)

    def rv(self, obj):
        return int(obj["metadata"]["resourceVersion"])

    def assertStatus(self, body, code, reason):
        self.assertIsInstance(body, dict, body)
        self.assertEqual(body.get("kind"), "Status")
        self.assertEqual(body.get("apiVersion"), "v1")
        self.assertEqual(body.get("status"), "Failure")
        self.assertEqual(body.get("code"), code, body)
        self.assertEqual(body.get("reason"), reason, body)
        self.assertIsInstance(body.get("message"), str)


# ============================================================================
# Raw HTTP: API semantics
# ============================================================================


class TestDiscovery(ServerTestCase):
    def test_version_and_core(self):
        v = self.api.ok("GET", "/version")
        self.assertEqual((v["major"], v["minor"]), ("1", "32"))
        self.assertEqual(self.api.ok("GET", "/api")["versions"], ["v1"])
        res = self.api.ok("GET", "/api/v1")
        self.assertEqual(res["kind"], "APIResourceList")
        names = {r["name"]: r for r in res["resources"]}
        for n in ("pods", "pods/status", "pods/log", "services", "configmaps", "events", "namespaces", "nodes",
                  "serviceaccounts"):
            self.assertIn(n, names)
        self.assertTrue(names["pods"]["namespaced"])
        self.assertFalse(names["nodes"]["namespaced"])
        self.assertIn("watch", names["pods"]["verbs"])
        self.assertEqual(names["pods"]["shortNames"], ["po"])

    def test_groups(self):
        groups = {g["name"]: g for g in self.api.ok("GET", "/apis")["groups"]}
        for g, v in (("coordination.k8s.io", "v1"), ("apps", "v1"), ("rbac.authorization.k8s.io", "v1"),
                     ("scheduling.volcano.sh", "v1beta1"), ("scheduling.x-k8s.io", "v1alpha1"),
                     ("apiextensions.k8s.io", "v1"), ("events.k8s.io", "v1")):
            self.assertEqual(groups[g]["preferredVersion"]["groupVersion"], g + "/" + v)
        leases = self.api.ok("GET", "/apis/coordination.k8s.io/v1")
        self.assertIn("leases", [r["name"] for r in leases["resources"]])
        pg = self.api.ok("GET", "/apis/scheduling.volcano.sh/v1beta1")
        self.assertIn("podgroups/status", [r["name"] for r in pg["resources"]])
        st, b = self.api.req("GET", "/apis/nope.example.com/v1")
        self.assertEqual(st, 404)
        self.assertStatus(b, 404, "NotFound")
        st, b = self.api.req("GET", "/api/v1/namespaces/default/nothings")
        self.assertEqual(st, 404)

    def test_openapi(self):
        st, _b, r = self.api.req("GET", "/openapi/v2", full=True)
        self.assertEqual(st, 200)
        self.assertEqual(self.api.req("GET", "/openapi/v3")[0], 404)


class TestCrud(ServerTestCase):
    def test_a_sub_path_that_leaves_its_volume_is_invalid(self):
        def with_mount(name, sub_path, key="subPath", lst="containers"):
            body = pod_body(name, volumes=[{"name": "v", "emptyDir": {}}])
            body["spec"][lst] = [{"name": "main", "image": "busybox:1.36",
                                  "volumeMounts": [{"name": "v", "mountPath": "/data", key: sub_path}]}]
            return body

        for name, sub_path, detail in (("up", "../escape", "must not contain '..'"),
                                       ("inner", "a/../../escape", "must not contain '..'"),
                                       ("abs", "/etc", "must be a relative path")):
            st, b = self.api.req("POST", self.pods(), with_mount(name, sub_path))
            self.assertEqual(st, 422, name)
            self.assertStatus(b, 422, "Invalid")
            self.assertEqual(b["details"]["causes"][0]["field"], "spec.containers[0].volumeMounts[0].subPath")
            self.assertIn(detail, b["message"])
        st, b = self.api.req("POST", self.pods(), with_mount("expr", "$(POD)/..", "subPathExpr", "initContainers"))
        self.assertEqual(st, 422)
        self.assertEqual(b["details"]["causes"][0]["field"], "spec.initContainers[0].volumeMounts[0].subPathExpr")
        self.api.ok("POST", self.pods(), with_mount("inside", "a/b..c/d"))   # '..' only as a whole element

    def test_create_sets_metadata(self):
        cm = self.api.ok("POST", self.cms(), {"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": "a"}, "data": {"k": "v"}})
        m = cm["metadata"]
        self.assertEqual(m["namespace"], self.ns)
        self.assertRegex(m["uid"], r"^[0-9a-f-]{36}$")
        self.assertRegex(m["creationTimestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertIsInstance(m["resourceVersion"], str)
        self.assertEqual(m["generation"], 1)
        got = self.api.ok("GET", self.cms("a"))
        self.assertEqual(got, cm)
        gen = self.api.ok("POST", self.cms(), {"metadata": {"generateName": "gen-"}, "data": {}})
        self.assertRegex(gen["metadata"]["name"], r"^gen-[a-z0-9]{5}$")
        self.assertEqual(gen["kind"], "ConfigMap")   # kind/apiVersion defaulted from the URL

    def test_resource_version_monotonic(self):
        seen = []
        for i in range(5):
            seen.append(self.rv(self.api.ok("POST", self.cms(), {"metadata": {"name": "m%d" % i}})))
            seen.append(self.rv(self.api.ok("POST", "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % self.ns,
                                            {"metadata": {"name": "l%d" % i}, "spec": {}})))
            seen.append(self.rv(self.api.ok("PATCH", self.cms("m%d" % i), {"data": {"x": "1"}},
                                            "application/merge-patch+json")))
        self.assertEqual(seen, sorted(seen))
        self.assertEqual(len(set(seen)), len(seen))
        lst = self.api.ok("GET", self.cms())
        self.assertGreaterEqual(int(lst["metadata"]["resourceVersion"]), seen[-1])
        self.assertNotIn("kind", lst["items"][0])   # built-in list items carry no kind, as on a real server

    def test_errors_are_status_bodies(self):
        self.api.ok("POST", self.cms(), {"metadata": {"name": "dup"}})
        st, b = self.api.req("POST", self.cms(), {"metadata": {"name": "dup"}})
        self.assertEqual(st, 409)
        self.assertStatus(b, 409, "AlreadyExists")
        self.assertEqual(b["details"], {"name": "dup", "kind": "configmaps"})
        self.assertEqual(b["message"], 'configmaps "dup" already exists')
        st, b = self.api.req("GET", self.cms("missing"))
        self.assertEqual(st, 404)
        self.assertStatus(b, 404, "NotFound")
        self.assertEqual(b["message"], 'configmaps "missing" not found')
        st, b = self.api.req("POST", self.cms(), {"metadata": {}})
        self.assertEqual(st, 422)
        self.assertStatus(b, 422, "Invalid")
        self.assertEqual(b["details"]["causes"][0]["reason"], "FieldValueRequired")
        self.assertEqual(b["details"]["causes"][0]["field"], "metadata.name")
        st, b = self.api.req("POST", self.cms(), {"metadata": {"name": "Not_A_Name"}})
        self.assertEqual(st, 422)
        self.assertEqual(b["details"]["causes"][0]["reason"], "FieldValueInvalid")
        self.assertIn("RFC 1123 subdomain", b["message"])
        st, b = self.api.req("POST", self.pods(), {"metadata": {"name": "nocontainers"}, "spec": {}})
        self.assertEqual(st, 422)
        self.assertEqual(b["details"]["kind"], "Pod")
        self.assertIn("spec.containers", [c["field"] for c in b["details"]["causes"]])
        st, b = self.api.req("POST", "/api/v1/namespaces/no-such-ns/configmaps", {"metadata": {"name": "x"}})
        self.assertEqual(st, 404)
        st, b = self.api.req("POST", self.cms(), {"metadata": {"name": "x", "labels": {"bad key!": "v"}}})
        self.assertEqual(st, 422)
        st, b = self.api.req("POST", self.cms(), b"{not json")
        self.assertEqual(st, 400)
        self.assertStatus(b, 400, "BadRequest")
        st, b = self.api.req("POST", self.cms(), {"apiVersion": "v2", "metadata": {"name": "x"}})
        self.assertEqual(st, 400)
        st, b = self.api.req("PUT", "/api/v1/namespaces/%s/configmaps" % self.ns, {"metadata": {"name": "x"}})
        self.assertEqual(st, 405)
        self.assertStatus(b, 405, "MethodNotAllowed")

    def test_update_conflict_and_noop(self):
        cm = self.api.ok("POST", self.cms(), {"metadata": {"name": "c"}, "data": {"a": "1"}})
        cm2 = json.loads(json.dumps(cm))
        cm2["data"]["a"] = "2"
        upd = self.api.ok("PUT", self.cms("c"), cm2)
        self.assertGreater(self.rv(upd), self.rv(cm))
        cm["data"]["a"] = "3"     # stale resourceVersion
        st, b = self.api.req("PUT", self.cms("c"), cm)
        self.assertEqual(st, 409)
        self.assertStatus(b, 409, "Conflict")
        self.assertEqual(b["message"], 'Operation cannot be fulfilled on configmaps "c": the object has been '
                                       'modified; please apply your changes to the latest version and try again')
        same = self.api.ok("PUT", self.cms("c"), upd)          # no change: no new resourceVersion
        self.assertEqual(same["metadata"]["resourceVersion"], upd["metadata"]["resourceVersion"])
        nov = dict(upd, data={"a": "4"})
        nov["metadata"] = dict(upd["metadata"])
        del nov["metadata"]["resourceVersion"]                 # unconditional update is allowed
        self.assertEqual(self.api.ok("PUT", self.cms("c"), nov)["data"], {"a": "4"})
        st, _ = self.api.req("PUT", self.cms("other"), dict(nov, metadata={"name": "other"}))
        self.assertEqual(st, 404)
        st, b = self.api.req("PUT", self.cms("c"), dict(nov, metadata={"name": "wrong"}))
        self.assertEqual(st, 400)
        st, b = self.api.req("PATCH", self.cms("c"), {"metadata": {"resourceVersion": cm["metadata"]
                                                                    ["resourceVersion"]}, "data": {"z": "1"}},
                             "application/merge-patch+json")
        self.assertEqual(st, 409)

    def test_patches(self):
        self.api.ok("POST", self.cms(), {"metadata": {"name": "p", "labels": {"a": "1", "b": "2"}},
                                         "data": {"x": "1", "y": "2"}})
        out = self.api.ok("PATCH", self.cms("p"), {"metadata": {"labels": {"b": None, "c": "3"}},
                                                   "data": {"x": None}}, "application/merge-patch+json")
        self.assertEqual(out["metadata"]["labels"], {"a": "1", "c": "3"})
        self.assertEqual(out["data"], {"y": "2"})
        out = self.api.ok("PATCH", self.cms("p"), [{"op": "add", "path": "/data/z", "value": "9"},
                                                   {"op": "remove", "path": "/metadata/labels/a"}],
                          "application/json-patch+json")
        self.assertEqual(out["data"], {"y": "2", "z": "9"})
        self.assertEqual(out["metadata"]["labels"], {"c": "3"})
        st, b = self.api.req("PATCH", self.cms("p"), [{"op": "test", "path": "/data/z", "value": "0"}],
                             "application/json-patch+json")
        self.assertEqual(st, 422)
        st, b = self.api.req("PATCH", self.cms("p"), {"data": {}}, "text/plain")
        self.assertEqual(st, 415)
        # strategic merge patch merges containers by name (merge patch would replace the list)
        self.api.ok("POST", self.pods(), pod_body("smp", containers=[
            {"name": "a", "image": "img:1"}, {"name": "b", "image": "img:1"}]))
        out = self.api.ok("PATCH", self.pods("smp"), {"spec": {"containers": [{"name": "b", "image": "img:2"}]}},
                          "application/strategic-merge-patch+json")
        self.assertEqual([(c["name"], c["image"]) for c in out["spec"]["containers"]],
                         [("a", "img:1"), ("b", "img:2")])
        st, b = self.api.req("PATCH", self.pods("smp"), {"spec": {"containers": [{"name": "c", "image": "x"}]}},
                             "application/strategic-merge-patch+json")
        self.assertEqual(st, 422)          # pod spec is immutable apart from images etc.
        self.assertIn("pod updates may not change fields", b["message"])

    def test_label_selectors(self):
        for name, labels in (("a", {"app": "web", "tier": "fe"}), ("b", {"app": "web", "tier": "be"}),
                             ("c", {"app": "db"}), ("d", {})):
            self.api.ok("POST", self.cms(), {"metadata": {"name": name, "labels": labels}})

        def sel(s):
            lst = self.api.ok("GET", self.cms() + "?labelSelector=" + urllib.parse.quote(s))
            return sorted(i["metadata"]["name"] for i in lst["items"])
        self.assertEqual(sel("app=web"), ["a", "b"])
        self.assertEqual(sel("app==web,tier=be"), ["b"])
        self.assertEqual(sel("app!=web"), ["c", "d"])
        self.assertEqual(sel("tier in (fe,be)"), ["a", "b"])
        self.assertEqual(sel("app notin (web)"), ["c", "d"])
        self.assertEqual(sel("tier"), ["a", "b"])
        self.assertEqual(sel("!tier"), ["c", "d"])
        self.assertEqual(sel("app in (web, db),!tier"), ["c"])
        st, b = self.api.req("GET", self.cms() + "?labelSelector=" + urllib.parse.quote("app in web"))
        self.assertEqual(st, 400)
        self.assertStatus(b, 400, "BadRequest")

    def test_field_selectors(self):
        self.api.ok("POST", self.pods(), pod_body("f1"))
        self.api.ok("POST", self.pods(), pod_body("f2", schedulerName="volcano"))
        self.running("f1")

        def sel(s):
            lst = self.api.ok("GET", self.pods() + "?fieldSelector=" + urllib.parse.quote(s))
            return sorted(i["metadata"]["name"] for i in lst["items"])
        self.assertEqual(sel("status.phase=Running"), ["f1"])
        self.assertEqual(sel("status.phase!=Running"), ["f2"])
        self.assertEqual(sel("spec.nodeName="), ["f2"])
        self.assertEqual(sel("metadata.name=f2"), ["f2"])
        self.assertEqual(sel("metadata.namespace=%s,metadata.name!=f2" % self.ns), ["f1"])
        st, _ = self.api.req("GET", self.pods() + "?fieldSelector=spec.bogus%3Dx")
        self.assertEqual(st, 400)

    def test_limit_continue(self):
        for i in range(7):
            self.api.ok("POST", self.cms(), {"metadata": {"name": "item-%d" % i}})
        page = self.api.ok("GET", self.cms() + "?limit=3")
        names = [i["metadata"]["name"] for i in page["items"]]
        rv = page["metadata"]["resourceVersion"]
        self.assertEqual(page["metadata"]["remainingItemCount"], 4)
        self.api.ok("POST", self.cms(), {"metadata": {"name": "item-99"}})     # not in the snapshot
        self.api.ok("DELETE", self.cms("item-6"))                               # still in the snapshot
        while page["metadata"].get("continue"):
            page = self.api.ok("GET", self.cms() + "?limit=3&continue=" + page["metadata"]["continue"])
            self.assertEqual(page["metadata"]["resourceVersion"], rv)
            names += [i["metadata"]["name"] for i in page["items"]]
        self.assertEqual(names, ["item-%d" % i for i in range(7)])
        page = self.api.ok("GET", self.cms() + "?limit=2")
        self.control("faults", {"compact": True})
        st, b = self.api.req("GET", self.cms() + "?limit=2&continue=" + page["metadata"]["continue"])
        self.assertEqual(st, 410)
        self.assertStatus(b, 410, "Expired")
        st, b = self.api.req("GET", self.cms() + "?limit=2&continue=garbage")
        self.assertEqual(st, 400)

    def test_keep_alive(self):
        c = self.api.conn()
        for _ in range(3):
            c.request("GET", "/api/v1/namespaces/default")
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            json.loads(r.read())
        c.close()

    def test_leases_optimistic_concurrency(self):
        path = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % self.ns
        lease = self.api.ok("POST", path, {"metadata": {"name": "leader"},
                                           "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})
        results = []

        def take(who):
            body = json.loads(json.dumps(lease))
            body["spec"]["holderIdentity"] = who
            results.append(self.api.req("PUT", path + "/leader", body)[0])
        ts = [threading.Thread(target=take, args=(w,)) for w in ("b", "c", "d")]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(sorted(results), [200, 409, 409])

    def test_events(self):
        path = "/api/v1/namespaces/%s/events" % self.ns
        for n, obj in (("e1", "p1"), ("e2", "p2")):
            self.api.ok("POST", path, {"metadata": {"name": n}, "involvedObject": {"kind": "Pod", "name": obj,
                                                                                 "namespace": self.ns},
                                       "reason": "Started", "message": "m", "type": "Normal", "count": 1})
        lst = self.api.ok("GET", path + "?fieldSelector=involvedObject.name%3Dp2")
        self.assertEqual([e["metadata"]["name"] for e in lst["items"]], ["e2"])
        ev = self.api.ok("PATCH", path + "/e2", {"count": 2}, "application/merge-patch+json")
        self.assertEqual(ev["count"], 2)

    def test_413_and_dry_run(self):
        st, b = self.api.req("POST", self.cms(), {"metadata": {"name": "big"}, "data": {"x": "y" * (3 << 20)}})
        self.assertEqual(st, 413)
        self.assertStatus(b, 413, "RequestEntityTooLarge")
        st, b = self.api.req("POST", self.cms() + "?dryRun=All", {"metadata": {"name": "dry"}})
        self.assertEqual(st, 201)
        self.assertEqual(self.api.req("GET", self.cms("dry"))[0], 404)

    def test_namespaces(self):
        self.api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "doomed"}})
        sa = self.api.ok("GET", "/api/v1/namespaces/doomed/serviceaccounts/default")
        self.assertEqual(sa["metadata"]["namespace"], "doomed")
        self.api.ok("POST", "/api/v1/namespaces/doomed/configmaps", {"metadata": {"name": "x"}})
        self.api.ok("DELETE", "/api/v1/namespaces/doomed")
        self.assertEqual(self.api.req("GET", "/api/v1/namespaces/doomed/configmaps/x")[0], 404)
        self.assertEqual(self.api.req("GET", "/api/v1/namespaces/doomed")[0], 404)
        st, b = self.api.req("DELETE", "/api/v1/namespaces/default")
        self.assertEqual(st, 403)
        st, b = self.api.req("POST", "/api/v1/namespaces", {"metadata": {"name": "Bad.Name"}})
        self.assertEqual(st, 422)


class TestCustomResources(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.api.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", CRD)

    def test_crd_discovery(self):
        groups = [g["name"] for g in self.api.ok("GET", "/apis")["groups"]]
        self.assertIn("fleet.paddlepaddle.org", groups)
        res = {r["name"]: r for r in self.api.ok("GET", "/apis/fleet.paddlepaddle.org/v1")["resources"]}
        self.assertEqual(res["fleetjobs"]["kind"], "FleetJob")
        self.assertEqual(res["fleetjobs"]["shortNames"], ["fj"])
        self.assertTrue(res["fleetjobs"]["namespaced"])
        self.assertIn("fleetjobs/status", res)
        crd = self.api.ok("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                 "fleetjobs.fleet.paddlepaddle.org")
        conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        self.assertEqual(conds["Established"], "True")
        bad = json.loads(json.dumps(CRD))
        bad["metadata"]["name"] = "wrong.name.org"
        st, b = self.api.req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", bad)
        self.assertEqual(st, 422)

    def test_generation_and_status_subresource(self):
        path = FJ_PATH % self.ns
        fj = self.api.ok("POST", path, {"apiVersion": "fleet.paddlepaddle.org/v1", "kind": "FleetJob",
                                        "metadata": {"name": "j"}, "spec": {"workers": 2},
                                        "status": {"phase": "Ignored"}})
        self.assertEqual(fj["metadata"]["generation"], 1)
        self.assertNotIn("status", fj)                       # status dropped on create
        fj = self.api.ok("PATCH", path + "/j", {"metadata": {"labels": {"x": "y"}}}, "application/merge-patch+json")
        self.assertEqual(fj["metadata"]["generation"], 1)    # metadata change: no bump
        fj["spec"]["workers"] = 3
        fj["status"] = {"phase": "Sneaky"}
        fj = self.api.ok("PUT", path + "/j", fj)
        self.assertEqual(fj["metadata"]["generation"], 2)    # spec change: bump
        self.assertNotIn("status", fj)                       # main resource ignores status
        rv = self.rv(fj)
        fj["status"] = {"phase": "Running"}
        fj["spec"]["workers"] = 100
        st = self.api.ok("PUT", path + "/j/status", fj)
        self.assertEqual(st["status"], {"phase": "Running"})
        self.assertEqual(st["spec"]["workers"], 3)            # status subresource ignores spec
        self.assertEqual(st["metadata"]["generation"], 2)
        self.assertGreater(self.rv(st), rv)
        st2 = self.api.ok("PATCH", path + "/j/status", {"status": {"phase": "Done"}}, "application/merge-patch+json")
        self.assertEqual(st2["status"]["phase"], "Done")
        fj["status"] = {"phase": "Stale"}
        code, b = self.api.req("PUT", path + "/j/status", fj)    # stale resourceVersion
        self.assertEqual(code, 409)
        code, b = self.api.req("PATCH", path + "/j", {"spec": {"workers": 1}},
                               "application/strategic-merge-patch+json")
        self.assertEqual(code, 415)                          # as the real server: no SMP for CRs
        lst = self.api.ok("GET", path)
        self.assertEqual(lst["kind"], "FleetJobList")
        self.assertEqual(lst["items"][0]["kind"], "FleetJob")

    def test_pods_status_subresource(self):
        self.api.ok("POST", self.pods(), pod_body("s"))
        p = self.running("s")
        p["status"]["phase"] = "Failed"
        p["metadata"]["labels"] = {"changed": "yes"}
        out = self.api.ok("PUT", self.pods("s"), p)
        self.assertEqual(out["status"]["phase"], "Running")
        self.assertEqual(out["metadata"]["labels"], {"changed": "yes"})
        out = self.api.ok("PATCH", self.pods("s") + "/status", {"status": {"message": "hi"},
                                                                "metadata": {"labels": {"no": "no"}}},
                          "application/merge-patch+json")
        self.assertEqual(out["status"]["message"], "hi")
        self.assertEqual(out["metadata"]["labels"], {"changed": "yes"})

    def test_crd_delete_unregisters(self):
        crd = json.loads(json.dumps(CRD))
        crd["metadata"]["name"] = "widgets.example.io"
        crd["spec"].update(group="example.io", scope="Cluster")
        crd["spec"]["names"] = {"plural": "widgets", "kind": "Widget"}
        self.api.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        self.api.ok("POST", "/apis/example.io/v1/widgets", {"apiVersion": "example.io/v1", "kind": "Widget",
                                                            "metadata": {"name": "w"}})
        self.assertEqual(self.api.ok("GET", "/apis/example.io/v1/widgets/w")["metadata"]["name"], "w")
        self.api.ok("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.io")
        self.assertEqual(self.api.req("GET", "/apis/example.io/v1/widgets/w")[0], 404)
        self.assertNotIn("example.io", [g["name"] for g in self.api.ok("GET", "/apis")["groups"]])


class TestGarbageCollection(ServerTestCase):
    def owner_and_dependents(self, n=2, block=False):
        owner = self.api.ok("POST", self.cms(), {"metadata": {"name": "owner"}})
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"],
               "controller": True}
        if block:
            ref["blockOwnerDeletion"] = True
        for i in range(n):
            self.api.ok("POST", self.pods(), dict(pod_body("dep-%d" % i),
                                                  metadata={"name": "dep-%d" % i, "ownerReferences": [ref]}))
            self.api.ok("POST", self.cms(), {"metadata": {"name": "cdep-%d" % i, "ownerReferences": [ref]}})
        return owner

    def gone(self, path):
        return self.api.req("GET", path)[0] == 404

    def test_background(self):
        self.owner_and_dependents()
        self.running("dep-0")
        self.api.ok("DELETE", self.cms("owner") + "?propagationPolicy=Background")
        for i in range(2):
            wait_for(lambda: self.gone(self.pods("dep-%d" % i)), what="pod GC")
            wait_for(lambda: self.gone(self.cms("cdep-%d" % i)), what="configmap GC")

    def test_orphan(self):
        self.owner_and_dependents()
        self.api.ok("DELETE", self.cms("owner"), {"kind": "DeleteOptions", "apiVersion": "v1",
                                                  "propagationPolicy": "Orphan"})
        self.assertTrue(self.gone(self.cms("owner")))
        for i in range(2):
            dep = self.api.ok("GET", self.cms("cdep-%d" % i))
            self.assertNotIn("ownerReferences", dep["metadata"])
            self.assertNotIn("ownerReferences", self.api.ok("GET", self.pods("dep-%d" % i))["metadata"])

    def test_foreground(self):
        self.owner_and_dependents(block=True)
        self.running("dep-0")
        self.running("dep-1")
        # a finalizer holds one blocking dependent, and with it the owner
        self.api.ok("PATCH", self.cms("cdep-0"), {"metadata": {"finalizers": ["example.io/hold"]}},
                    "application/merge-patch+json")
        out = self.api.ok("DELETE", self.cms("owner"), {"propagationPolicy": "Foreground"})
        self.assertIn("foregroundDeletion", out["metadata"]["finalizers"])
        self.assertIn("deletionTimestamp", out["metadata"])
        for i in range(2):
            wait_for(lambda: self.gone(self.pods("dep-%d" % i)), what="dependent pod deleted")
        self.assertTrue(self.gone(self.cms("cdep-1")))
        held = self.api.ok("GET", self.cms("cdep-0"))
        self.assertIn("deletionTimestamp", held["metadata"])
        self.assertEqual(self.api.req("GET", self.cms("owner"))[0], 200)    # still waiting for cdep-0
        self.api.ok("PATCH", self.cms("cdep-0"), {"metadata": {"finalizers": None}}, "application/merge-patch+json")
        self.assertTrue(self.gone(self.cms("cdep-0")))
        self.assertTrue(self.gone(self.cms("owner")))

    def test_two_owners_and_dangling(self):
        a = self.api.ok("POST", self.cms(), {"metadata": {"name": "a"}})
        b = self.api.ok("POST", self.cms(), {"metadata": {"name": "b"}})
        refs = [{"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]}
                for o in (a, b)]
        self.api.ok("POST", self.cms(), {"metadata": {"name": "d", "ownerReferences": refs}})
        self.api.ok("DELETE", self.cms("a"))
        d = self.api.ok("GET", self.cms("d"))
        self.assertEqual([r["name"] for r in d["metadata"]["ownerReferences"]], ["b"])
        self.api.ok("DELETE", self.cms("b"))
        self.assertTrue(self.gone(self.cms("d")))

    def test_finalizers(self):
        self.api.ok("POST", self.cms(), {"metadata": {"name": "f", "finalizers": ["example.io/hold"]}})
        out = self.api.ok("DELETE", self.cms("f"))
        self.assertIn("deletionTimestamp", out["metadata"])
        cur = self.api.ok("GET", self.cms("f"))
        st, b = self.api.req("PATCH", self.cms("f"), {"metadata": {"finalizers": ["example.io/hold", "new"]}},
                             "application/merge-patch+json")
        self.assertEqual(st, 422)
        cur["metadata"]["finalizers"] = []
        self.api.ok("PUT", self.cms("f"), cur)
        self.assertTrue(self.gone(self.cms("f")))

    def test_delete_preconditions_and_collection(self):
        cm = self.api.ok("POST", self.cms(), {"metadata": {"name": "pc", "labels": {"g": "1"}}})
        st, b = self.api.req("DELETE", self.cms("pc"), {"preconditions": {"uid": "nope"}})
        self.assertEqual(st, 409)
        st, b = self.api.req("DELETE", self.cms("pc"), {"preconditions": {"resourceVersion": "1"}})
        self.assertEqual(st, 409)
        self.api.ok("DELETE", self.cms("pc"), {"preconditions": {"uid": cm["metadata"]["uid"]}})
        for i in range(3):
            self.api.ok("POST", self.cms(), {"metadata": {"name": "g%d" % i, "labels": {"g": str(i % 2)}}})
        self.api.ok("DELETE", self.cms() + "?labelSelector=g%3D0")
        left = [i["metadata"]["name"] for i in self.api.ok("GET", self.cms())["items"]]
        self.assertEqual(left, ["g1"])


class TestWatch(ServerTestCase):
    def test_resume_replays_exactly_missed_events(self):
        base = self.api.ok("GET", self.cms())["metadata"]["resourceVersion"]
        self.api.ok("POST", self.cms(), {"metadata": {"name": "w1"}})
        self.api.ok("PATCH", self.cms("w1"), {"data": {"a": "1"}}, "application/merge-patch+json")
        self.api.ok("POST", self.cms(), {"metadata": {"name": "w2"}})
        mid = self.api.ok("DELETE", self.cms("w1"))
        self.api.ok("POST", "/api/v1/namespaces/default/configmaps",
                    {"metadata": {"generateName": "other-ns-"}})   # other namespace: filtered out
        evs, end = self.api.watch(self.cms() + "?watch=1&timeoutSeconds=1&resourceVersion=" + base)
        self.assertEqual(end, "clean")
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs],
                         [("ADDED", "w1"), ("MODIFIED", "w1"), ("ADDED", "w2"), ("DELETED", "w1")])
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
        self.assertEqual(rvs, sorted(rvs))
        self.assertGreater(rvs[-1], self.rv(mid))      # DELETED carries the deletion's resourceVersion
        self.assertEqual(evs[0]["object"]["kind"], "ConfigMap")
        # resume from the middle: only what came after
        evs, _ = self.api.watch(self.cms() + "?watch=true&timeoutSeconds=1&resourceVersion=%d" % rvs[1])
        self.assertEqual([e["type"] for e in evs], ["ADDED", "DELETED"])

    def test_live_events_and_initial_list(self):
        self.api.ok("POST", self.cms(), {"metadata": {"name": "pre"}})
        c, r = self.api.open_watch(self.cms() + "?watch=1&timeoutSeconds=5")   # no RV: synthetic ADDED first
        self.assertEqual(r.status, 200)
        self.assertEqual(r.getheader("Transfer-Encoding"), "chunked")
        self.api.ok("POST", self.cms(), {"metadata": {"name": "live"}})
        self.api.ok("DELETE", self.cms("pre"))
        evs, end = Raw.read_events(c, r, count=3)
        self.assertEqual([(e["type"], e["object"]["metadata"]["name"]) for e in evs],
                         [("ADDED", "pre"), ("ADDED", "live"), ("DELETED", "pre")])

    def test_selector_transitions(self):
        self.api.ok("POST", self.cms(), {"metadata": {"name": "s", "labels": {"on": "yes"}}})
        rv = self.api.ok("GET", self.cms())["metadata"]["resourceVersion"]
        self.api.ok("PATCH", self.cms("s"), {"metadata": {"labels": {"on": "no"}}}, "application/merge-patch+json")
        self.api.ok("PATCH", self.cms("s"), {"metadata": {"labels": {"on": "yes"}}}, "application/merge-patch+json")
        evs, _ = self.api.watch(self.cms() + "?watch=1&timeoutSeconds=1&labelSelector=on%3Dyes&resourceVersion="
                                + rv)
        self.assertEqual([e["type"] for e in evs], ["DELETED", "ADDED"])

    def test_bookmarks(self):
        self.control("config", {"bookmarkIntervalMs": 100})
        try:
            evs, _ = self.api.watch(self.cms() + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=5"
                                    "&resourceVersion=" + self.api.ok("GET", self.cms())["metadata"]["resourceVersion"],
                                    count=2)
        finally:
            self.control("config", {"bookmarkIntervalMs": 1000})
        self.assertEqual([e["type"] for e in evs], ["BOOKMARK", "BOOKMARK"])
        obj = evs[0]["object"]
        self.assertEqual(set(obj), {"kind", "apiVersion", "metadata"})
        self.assertEqual(set(obj["metadata"]), {"resourceVersion"})
        self.assertEqual(obj["kind"], "ConfigMap")
        # no bookmarks unless asked for
        evs, end = self.api.watch(self.cms() + "?watch=1&timeoutSeconds=1&resourceVersion="
                                  + obj["metadata"]["resourceVersion"])
        self.assertEqual((evs, end), ([], "clean"))

    def test_timeout_seconds(self):
        t0 = time.monotonic()
        evs, end = self.api.watch(self.cms() + "?watch=1&timeoutSeconds=1&resourceVersion=0")
        self.assertEqual(end, "clean")
        self.assertLess(time.monotonic() - t0, 3)

    def test_single_object_and_legacy_paths(self):
        self.api.ok("POST", self.cms(), {"metadata": {"name": "one"}})
        self.api.ok("POST", self.cms(), {"metadata": {"name": "two"}})
        evs, _ = self.api.watch(self.cms() + "?watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Dtwo")
        self.assertEqual([e["object"]["metadata"]["name"] for e in evs], ["two"])
        evs, _ = self.api.watch("/api/v1/watch/namespaces/%s/configmaps/one?timeoutSeconds=1" % self.ns)
        self.assertEqual([e["object"]["metadata"]["name"] for e in evs], ["one"])

    def test_pod_lifecycle_events(self):
        rv = self.api.ok("GET", self.pods())["metadata"]["resourceVersion"]
        self.api.ok("POST", self.pods(), pod_body("lw"))
        self.running("lw")
        self.api.ok("DELETE", self.pods("lw"))
        evs, _ = self.api.watch(self.pods() + "?watch=1&resourceVersion=" + rv, until=lambda e: e["type"] == "DELETED")
        types = [e["type"] for e in evs]
        self.assertEqual(types[0], "ADDED")
        self.assertEqual(types[-1], "DELETED")
        self.assertEqual(set(types[1:-1]), {"MODIFIED"})
        phases = [e["object"]["status"].get("phase") for e in evs]
        self.assertEqual(phases[0], "Pending")
        self.assertIn("Running", phases)
        self.assertIn("deletionTimestamp", evs[-2]["object"]["metadata"])   # graceful deletion first


class TestWatchExpiry(ServerTestCase):
    per_test_server = True
    server_kwargs = {"watch_cache_size": 5}

    def test_too_old_resource_version(self):
        rv = self.api.ok("GET", self.cms())["metadata"]["resourceVersion"]
        for i in range(8):
            self.api.ok("POST", self.cms(), {"metadata": {"name": "x%d" % i}})
        evs, end = self.api.watch(self.cms() + "?watch=1&resourceVersion=" + rv)
        self.assertEqual(end, "clean")
        self.assertEqual(len(evs), 1)
        self.assertEqual(evs[0]["type"], "ERROR")
        self.assertStatus(evs[0]["object"], 410, "Expired")
        self.assertRegex(evs[0]["object"]["message"], r"^too old resource version: %s \(\d+\)$" % rv)
        # a recent RV still works (within the 5-event window)
        recent = self.api.ok("GET", self.cms("x6"))["metadata"]["resourceVersion"]
        evs, _ = self.api.watch(self.cms() + "?watch=1&timeoutSeconds=1&resourceVersion=" + recent)
        self.assertEqual([e["object"]["metadata"]["name"] for e in evs], ["x7"])
        # list with an exact old RV is gone too
        st, b = self.api.req("GET", self.cms() + "?resourceVersionMatch=Exact&resourceVersion=" + rv)
        self.assertEqual(st, 410)

    def test_compact(self):
        rv = self.api.ok("GET", self.cms())["metadata"]["resourceVersion"]
        self.api.ok("POST", self.cms(), {"metadata": {"name": "c"}})
        self.control("faults", {"compact": True})
        evs, _ = self.api.watch(self.cms() + "?watch=1&resourceVersion=" + rv)
        self.assertEqual(evs[0]["object"]["code"], 410)


class TestFaults(ServerTestCase):
    per_test_server = True

    def test_fail_next_with_match(self):
        self.control("faults", {"failNext": 2, "code": 503, "retryAfter": 2, "match": "GET /api/v1/namespaces"})
        st, b = self.api.req("POST", self.cms(), {"metadata": {"name": "unaffected"}})
        self.assertEqual(st, 201)
        st, b, r = self.api.req("GET", self.cms(), full=True)
        self.assertEqual(st, 503)
        self.assertStatus(b, 503, "ServiceUnavailable")
        self.assertEqual(r.getheader("Retry-After"), "2")
        self.assertEqual(self.api.req("GET", self.cms())[0], 503)
        self.assertEqual(self.api.req("GET", self.cms())[0], 200)

    def test_429_and_500(self):
        self.control("faults", {"failNext": 1, "code": 429, "retryAfter": 3})
        st, b, r = self.api.req("GET", "/api/v1/namespaces", full=True)
        self.assertEqual(st, 429)
        self.assertStatus(b, 429, "TooManyRequests")
        self.assertEqual(r.getheader("Retry-After"), "3")
        self.assertEqual(b["details"]["retryAfterSeconds"], 3)
        self.control("faults", {"failNext": 1, "code": 500})
        st, b = self.api.req("GET", "/api/v1/namespaces")
        self.assertEqual(st, 500)
        self.assertStatus(b, 500, "InternalError")
        self.assertEqual(self.api.req("GET", "/api/v1/namespaces")[0], 200)

    def test_latency(self):
        self.control("faults", {"latencyMs": 200})
        t0 = time.monotonic()
        self.api.ok("GET", "/api/v1/namespaces")
        self.assertGreaterEqual(time.monotonic() - t0, 0.19)
        self.control("faults", {"reset": True, "failNext": 1, "code": 500})
        self.assertEqual(self.control("faults", method="GET")["latencyMs"], 0)
        self.control("faults", {"reset": True})
        self.assertEqual(self.control("faults", method="GET")["rules"], [])
        self.assertEqual(self.api.req("POST", "/fake/v1/faults", {"failnext": 1})[0], 400)   # typo caught

    def test_drop_watches(self):
        c, r = self.api.open_watch(self.cms() + "?watch=1&resourceVersion=0")
        self.assertEqual(self.control("state")["watches"], 1)
        self.api.ok("POST", self.cms(), {"metadata": {"name": "before-drop"}})
        evs, _ = Raw.read_events(c, r, count=1, close=False)
        self.assertEqual([e["object"]["metadata"]["name"] for e in evs], ["before-drop"])
        self.control("faults", {"dropWatches": True})
        evs, end = Raw.read_events(c, r)
        self.assertEqual((evs, end), ([], "abrupt"))        # no terminating zero-length chunk
        wait_for(lambda: self.control("state")["watches"] == 0, what="watch unregistered")

    def test_expire_watches(self):
        c, r = self.api.open_watch(self.cms() + "?watch=1&resourceVersion=0")
        self.control("faults", {"expireWatches": True})
        evs, end = Raw.read_events(c, r)
        self.assertEqual(end, "clean")
        self.assertEqual(evs[-1]["type"], "ERROR")
        self.assertEqual(evs[-1]["object"]["code"], 410)

    def test_malformed_responses(self):
        self.api.ok("POST", self.cms(), {"metadata": {"name": "m"}})
        full = self.api.req("GET", self.cms("m"))[1]
        self.control("faults", {"truncateNext": 1})
        st, b, r = self.api.req("GET", self.cms("m"), full=True)
        self.assertEqual(st, 200)
        self.assertIsInstance(b, bytes)                      # not parseable JSON
        self.assertTrue(json.dumps(full).startswith(b.decode()[:10]))
        self.control("faults", {"truncateNext": 1, "abort": True})
        c = self.api.conn()
        with self.assertRaises((http.client.IncompleteRead, ConnectionError)):
            c.request("GET", self.cms("m"))
            c.getresponse().read()
        c.close()
        self.control("faults", {"garbageNext": 1})
        st, b = self.api.req("GET", self.cms("m"))
        self.assertEqual(st, 200)
        self.assertIsInstance(b, bytes)
        self.control("faults", {"hugeNext": 1, "bytes": 5 << 20})
        st, b, r = self.api.req("GET", self.cms("m"), full=True)
        self.assertEqual(int(r.getheader("Content-Length")), 5 << 20)
        self.assertIsInstance(b, dict)                       # valid JSON, just huge
        self.control("faults", {"wrongContentTypeNext": 1})
        st, b, r = self.api.req("GET", self.cms("m"), full=True)
        self.assertTrue(r.getheader("Content-Type").startswith("text/html"))
        self.assertEqual(self.api.req("GET", self.cms("m"))[1], full)   # back to normal
        self.control("faults", {"garbageNext": 1, "match": "WATCH /api/v1"})
        self.assertEqual(self.api.req("GET", self.cms("m"))[0], 200)   # not a watch: unaffected
        with self.assertRaises(ValueError):
            self.api.watch(self.cms() + "?watch=1")

    def test_request_log(self):
        self.control("requests", method="DELETE")
        self.api.req("GET", self.cms("nope"))
        self.api.req("GET", "/api/v1/namespaces?limit=1")
        log = self.control("requests", method="GET")["requests"]
        self.assertEqual([(r["method"], r["path"], r["query"], r["code"]) for r in log],
                         [("GET", self.cms("nope"), "", 404), ("GET", "/api/v1/namespaces", "limit=1", 200)])
        self.assertIsInstance(log[0]["time"], float)

    def test_tokens(self):
        self.control("tokens", {"tokens": ["old"]})
        st, b = self.api.req("GET", "/api/v1/namespaces")
        self.assertEqual(st, 401)
        self.assertStatus(b, 401, "Unauthorized")
        self.api.token = "wrong"
        self.assertEqual(self.api.req("GET", "/api/v1/namespaces")[0], 401)
        self.api.token = "old"
        self.assertEqual(self.api.req("GET", "/api/v1/namespaces")[0], 200)
        self.control("faults", {"tokens": ["new"]})               # rotation
        self.assertEqual(self.api.req("GET", "/api/v1/namespaces")[0], 401)
        self.api.token = "new"
        self.assertEqual(self.api.req("GET", "/api/v1/namespaces")[0], 200)
        self.control("tokens", {"tokens": []})


class TestKubelet(ServerTestCase):
    def test_auto_runs_pods(self):
        self.api.ok("POST", self.pods(), pod_body("k1"))
        p = self.running("k1")
        st = p["status"]
        self.assertRegex(st["podIP"], r"^10\.\d+\.\d+\.\d+$")
        self.assertRegex(st["hostIP"], r"^172\.18\.0\.\d+$")
        self.assertRegex(p["spec"]["nodeName"], r"^node-\d$")
        self.assertEqual(st["podIPs"], [{"ip": st["podIP"]}])
        conds = {c["type"]: c["status"] for c in st["conditions"]}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
            self.assertEqual(conds[t], "True")
        cs = st["containerStatuses"][0]
        self.assertEqual((cs["name"], cs["ready"], cs["restartCount"]), ("main", True, 0))
        self.assertIn("running", cs["state"])
        self.api.ok("POST", self.pods(), pod_body("k2"))
        self.assertNotEqual(self.running("k2")["status"]["podIP"], st["podIP"])
        self.api.ok("POST", self.pods(), pod_body("hn", hostNetwork=True))
        p = self.running("hn")
        self.assertEqual(p["status"]["podIP"], p["status"]["hostIP"])

    def test_required_pod_anti_affinity_spreads_pods_over_nodes(self):
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"job": "a"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        nodes = set()
        for i in range(4):   # the fake has 4 nodes; other pods placed in between do not matter
            self.api.ok("POST", self.pods(), pod_body("a%d" % i, labels={"job": "a"}, affinity=anti))
            self.api.ok("POST", self.pods(), pod_body("b%d" % i))
            nodes.add(self.running("a%d" % i)["spec"]["nodeName"])
        self.assertEqual(len(nodes), 4)
        self.api.ok("POST", self.pods(), pod_body("a4", labels={"job": "a"}, affinity=anti))
        self.api.ok("POST", self.pods(), pod_body("ref"))
        self.running("ref")
        p = self.api.ok("GET", self.pods("a4"))
        self.assertEqual(p["status"].get("phase"), "Pending", "no node is free of job a")
        self.assertNotIn("nodeName", p["spec"])

    def test_fail_reports_the_log_tail_as_the_kubelet(self):
        """FallbackToLogsOnError: a non-zero exit puts the log's last 80 lines (their last 2 KiB)
        in the message; a written termination message wins; no policy or exit 0: no message."""
        fallback = [{"name": "main", "image": "busybox:1.36", "terminationMessagePolicy": "FallbackToLogsOnError"}]
        for n in ("tail", "long", "plain", "ok", "written"):
            self.api.ok("POST", self.pods(), pod_body(n) if n == "plain" else pod_body(n, containers=fallback))
            self.running(n)

        def message(p):
            return p["status"]["containerStatuses"][0]["state"]["terminated"].get("message")
        log = "".join("line %d\n" % i for i in range(100))
        p = self.pod_action("tail", action="fail", exitCode=1, reason="Error", log=log)
        self.assertEqual(message(p), "".join("line %d\n" % i for i in range(20, 100)))
        self.assertEqual(self.api.req("GET", self.pods("tail") + "/log?tailLines=1")[1], b"line 99\n")
        p = self.pod_action("long", action="fail", exitCode=137, reason="OOMKilled", log="x" * 3000 + "\nCUDA out of memory")
        self.assertEqual(len(message(p).encode()), 2048)
        self.assertTrue(message(p).endswith("xx\nCUDA out of memory\n"))
        self.assertEqual(p["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "OOMKilled")
        self.assertIsNone(message(self.pod_action("plain", action="fail", exitCode=1, log="boom")))
        self.assertIsNone(message(self.pod_action("ok", action="succeed", log="done")))
        p = self.pod_action("written", action="fail", exitCode=2, log="boom", terminationMessage="bad shard 7")
        self.assertEqual(message(p), "bad shard 7")

    def test_gang_scheduler_pods_stay_pending(self):
        self.api.ok("POST", self.pods(), pod_body("g", schedulerName="volcano"))
        self.api.ok("POST", self.pods(), pod_body("ref"))
        self.running("ref")     # the kubelet has processed later work, so "g" was left alone
        p = self.api.ok("GET", self.pods("g"))
        self.assertEqual(p["status"]["phase"], "Pending")
        self.assertNotIn("nodeName", p["spec"])
        self.assertNotIn("podIP", p["status"])
        self.api.ok("POST", self.pods("g") + "/binding", {"apiVersion": "v1", "kind": "Binding",
                                                          "metadata": {"name": "g"},
                                                          "target": {"kind": "Node", "name": "node-2"}})
        p = self.running("g")
        self.assertEqual(p["spec"]["nodeName"], "node-2")

    def test_init_containers_and_sidecars(self):
        self.api.ok("POST", self.pods(), pod_body("init", initContainers=[
            {"name": "setup", "image": "busybox"},
            {"name": "sidecar", "image": "envoy", "restartPolicy": "Always"}]))
        p = self.running("init")
        ics = {s["name"]: s for s in p["status"]["initContainerStatuses"]}
        self.assertEqual(ics["setup"]["state"]["terminated"]["exitCode"], 0)
        self.assertEqual(ics["setup"]["state"]["terminated"]["reason"], "Completed")
        self.assertIn("running", ics["sidecar"]["state"])
        self.assertTrue(ics["sidecar"]["ready"])

    def test_outcomes(self):
        for n in ("ok", "bad", "ev", "rs", "rd"):
            self.api.ok("POST", self.pods(), pod_body(n))
        for n in ("ok", "bad", "ev", "rs", "rd"):
            self.running(n)
        p = self.pod_action("ok", action="succeed")
        self.assertEqual(p["status"]["phase"], "Succeeded")
        self.assertEqual(p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0)
        p = self.pod_action("bad", action="fail", exitCode=3)
        self.assertEqual(p["status"]["phase"], "Failed")
        t = p["status"]["containerStatuses"][0]["state"]["terminated"]
        self.assertEqual((t["exitCode"], t["reason"]), (3, "Error"))
        p = self.pod_action("ev", action="evict")
        self.assertEqual((p["status"]["phase"], p["status"]["reason"]), ("Failed", "Evicted"))
        self.assertTrue(p["status"]["message"])
        before = self.api.ok("GET", self.pods("rs"))["status"]["podIP"]
        p = self.pod_action("rs", action="restart")
        cs = p["status"]["containerStatuses"][0]
        self.assertEqual(cs["restartCount"], 1)
        self.assertIn("terminated", cs["lastState"])
        self.assertNotEqual(p["status"]["podIP"], before)
        self.assertEqual(p["status"]["phase"], "Running")
        p = self.pod_action("rd", action="ready", container="main", ready=False)
        conds = {c["type"]: c["status"] for c in p["status"]["conditions"]}
        self.assertEqual((conds["Ready"], conds["ContainersReady"]), ("False", "False"))
        p = self.pod_action("rd", action="ready", ready=True)
        self.assertEqual({c["type"]: c["status"] for c in p["status"]["conditions"]}["Ready"], "True")
        st, b = self.api.req("POST", "/fake/v1/namespaces/%s/pods/missing" % self.ns, {"action": "succeed"})
        self.assertEqual(st, 404)

    def test_run_delay_and_seed(self):
        self.control("config", {"runDelayMs": 300})
        try:
            rv = self.api.ok("GET", self.pods())["metadata"]["resourceVersion"]
            self.api.ok("POST", self.pods(), pod_body("slow"))
            evs, _ = self.api.watch(self.pods() + "?watch=1&resourceVersion=" + rv,
                                    until=lambda e: e["object"]["status"].get("phase") == "Running")
        finally:
            self.control("config", {"runDelayMs": 0})
        creating = [e["object"]["status"] for e in evs if e["object"]["status"].get("podIP")][0]
        self.assertEqual(creating["phase"], "Pending")
        self.assertEqual(creating["containerStatuses"][0]["state"]["waiting"]["reason"], "ContainerCreating")
        out = self.control("seed", {"path": self.pods(), "count": 5, "namePrefix": "seeded-",
                                    "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}})
        self.assertEqual(out["created"], 5)
        for i in range(5):
            self.running("seeded-%d" % i)

    def test_logs(self):
        self.api.ok("POST", self.pods(), pod_body("lg"))
        self.running("lg")
        self.control("namespaces/%s/pods/lg/log" % self.ns, {"text": "line1\nline2\n"})
        st, b = self.api.req("GET", self.pods("lg") + "/log")
        self.assertEqual((st, b), (200, b"line1\nline2\n"))
        self.assertEqual(self.api.req("GET", self.pods("lg") + "/log?tailLines=1")[1], b"line2\n")
        self.assertEqual(self.api.req("GET", self.pods("lg") + "/log?container=main&limitBytes=3")[1], b"lin")
        self.assertEqual(self.api.req("GET", self.pods("lg") + "/log?container=nope")[0], 400)
        c = self.api.conn()
        c.request("GET", self.pods("lg") + "/log?follow=true")
        r = c.getresponse()
        self.assertEqual(r.readline(), b"line1\n")
        self.assertEqual(r.readline(), b"line2\n")
        self.control("namespaces/%s/pods/lg/log" % self.ns, {"text": "line3\n"})
        self.assertEqual(r.readline(), b"line3\n")
        self.pod_action("lg", action="succeed")
        self.assertEqual(r.read(), b"")      # the stream ends with the pod
        c.close()
        self.api.ok("POST", self.pods(), pod_body("two", containers=[{"name": "a", "image": "x"},
                                                                     {"name": "b", "image": "x"}]))
        self.running("two")
        st, b = self.api.req("GET", self.pods("two") + "/log")
        self.assertEqual(st, 400)
        self.assertIn("a container name must be specified", b["message"])


class TestKubeletManual(ServerTestCase):
    server_kwargs = {"kubelet": "manual"}

    def test_manual_mode(self):
        self.api.ok("POST", self.pods(), pod_body("m"))
        time.sleep(0.1)   # asserting that nothing happens needs a little time
        p = self.api.ok("GET", self.pods("m"))
        self.assertEqual(p["status"]["phase"], "Pending")
        self.assertNotIn("podIP", p["status"])
        p = self.pod_action("m", action="unschedulable", message="0/4 nodes are available")
        sched = [c for c in p["status"]["conditions"] if c["type"] == "PodScheduled"][0]
        self.assertEqual((sched["status"], sched["reason"]), ("False", "Unschedulable"))
        p = self.pod_action("m", action="run")
        self.assertEqual(p["status"]["phase"], "Running")
        self.assertTrue(p["status"]["podIP"])
        st, b = self.api.req("GET", self.pods("m") + "/log")
        self.assertEqual((st, b), (200, b""))


TRAINER = "fleet.paddlepaddle.org/Trainer"
SIDECAR = {"name": "fleet-sidecar", "image": "fleet-sidecar", "restartPolicy": "Always"}


def main_status(pod, name="main"):
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == name)


class TestRestartsInPlace(ServerTestCase):
    """The end action: a main container's exit, which the kubelet restarts in place or not per
    the pod's restartPolicy, as the real kubelet does."""

    def test_on_failure_restarts_a_failed_container_in_the_same_pod(self):
        self.api.ok("POST", self.pods(), pod_body("of", restartPolicy="OnFailure", initContainers=[SIDECAR]))
        before = self.running("of")
        self.control("namespaces/%s/pods/of/log" % self.ns, {"text": "first run\n"})
        p = self.pod_action("of", action="end", exitCode=3, log="boom")
        s = main_status(p)
        self.assertEqual((p["status"]["phase"], s["restartCount"], s["ready"]), ("Running", 1, True))
        self.assertIn("running", s["state"])
        last = s["lastState"]["terminated"]
        self.assertEqual((last["exitCode"], last["reason"]), (3, "Error"))
        self.assertEqual(last["containerID"], main_status(before)["containerID"])
        self.assertEqual(last["startedAt"], main_status(before)["state"]["running"]["startedAt"])
        self.assertIn("finishedAt", last)
        self.assertNotEqual(s["containerID"], last["containerID"], "a new container")
        self.assertEqual(p["status"]["podIP"], before["status"]["podIP"], "the same pod")
        self.assertEqual(self.api.req("GET", self.pods("of") + "/log?previous=true")[1], b"first run\nboom\n")
        self.assertEqual(self.api.req("GET", self.pods("of") + "/log")[1], b"")
        # Exit 0 is not restarted under OnFailure: the pod succeeds and its sidecar stops.
        p = self.pod_action("of", action="end", exitCode=0)
        s = main_status(p)
        self.assertEqual((p["status"]["phase"], s["restartCount"]), ("Succeeded", 1))
        self.assertEqual(s["state"]["terminated"]["reason"], "Completed")
        self.assertEqual(s["lastState"]["terminated"]["exitCode"], 3)
        self.assertIn("terminated", p["status"]["initContainerStatuses"][0]["state"])
        ready = [c for c in p["status"]["conditions"] if c["type"] == "Ready"][0]
        self.assertEqual((ready["status"], ready.get("reason")), ("False", "PodCompleted"))

    def test_always_restarts_any_exit(self):
        self.api.ok("POST", self.pods(), pod_body("al"))   # restartPolicy defaults to Always
        self.running("al")
        for n, code in ((1, 0), (2, 1)):
            p = self.pod_action("al", action="end", exitCode=code)
            self.assertEqual((p["status"]["phase"], main_status(p)["restartCount"]), ("Running", n))
            self.assertEqual(main_status(p)["lastState"]["terminated"]["exitCode"], code)

    def test_never_leaves_the_container_ended_and_the_pod_follows_its_containers(self):
        two = [{"name": "a", "image": "x"}, {"name": "b", "image": "x"}]
        self.api.ok("POST", self.pods(), pod_body("nv", restartPolicy="Never", containers=two))
        self.running("nv")
        p = self.pod_action("nv", action="end", container="a", exitCode=2)
        self.assertEqual(p["status"]["phase"], "Running", "b still runs")
        self.assertEqual(main_status(p, "a")["state"]["terminated"]["exitCode"], 2)
        self.assertEqual(main_status(p, "a")["restartCount"], 0)
        self.assertIn("running", main_status(p, "b")["state"])
        p = self.pod_action("nv", action="end", exitCode=0)   # every container still running: b
        self.assertEqual(p["status"]["phase"], "Failed", "a failed")
        self.api.ok("POST", self.pods(), pod_body("ok", restartPolicy="Never"))
        self.running("ok")
        self.assertEqual(self.pod_action("ok", action="end", exitCode=0)["status"]["phase"], "Succeeded")

    def test_bad_end_actions_are_refused(self):
        self.api.ok("POST", self.pods(), pod_body("bad", restartPolicy="Never", initContainers=[SIDECAR]))
        self.running("bad")
        path = "/fake/v1/namespaces/%s/pods/bad" % self.ns
        for body, message in (({"action": "end", "exitCode": 1, "container": "fleet-sidecar"},
                               "fleet-sidecar is not a main container of pod bad"),
                              ({"action": "end"}, "exitCode must be an integer"),
                              ({"action": "end", "exitCode": "1"}, "exitCode must be an integer"),
                              ({"action": "end", "exitCode": 256}, "exitCode must be an integer")):
            st, b = self.api.req("POST", path, body)
            self.assertEqual(st, 400, b)
            self.assertIn(message, b["message"])
        self.pod_action("bad", action="end", exitCode=1)
        st, b = self.api.req("POST", path, {"action": "end", "exitCode": 1})
        self.assertEqual(st, 400, b)
        self.assertIn("no main container of pod bad to end is running", b["message"])


class TestTrainersInPlace(ServerTestCase):
    """The fake kubelet plays fleet-sidecar --in-place for pods whose main container has
    FLEET_GATE_URL: the gate, the binding, the liveness probe and the Trainer condition."""

    def make(self, name, run=0, policy="OnFailure", job="j"):
        main = {"name": "main", "image": "paddle", "env": [{"name": "FLEET_GATE_URL",
                                                           "value": "http://127.0.0.1:8081/gate"}]}
        self.api.ok("POST", self.pods(), pod_body(
            name, labels={"fleet.paddlepaddle.org/job-name": job, "fleet.paddlepaddle.org/run": str(run)},
            restartPolicy=policy, containers=[main], initContainers=[SIDECAR]))
        return self.running(name)

    def endpoints(self, run, barrier=None, job="j"):
        notes = {"fleet.paddlepaddle.org/run": str(run)}
        if barrier is not None:
            notes["fleet.paddlepaddle.org/barrier"] = str(barrier)
        body = {"metadata": {"name": job + "-endpoints", "annotations": notes}, "data": {"hosts": "a,b"}}
        st, old = self.api.req("GET", self.cms(job + "-endpoints"))
        if st == 404:
            return self.api.ok("POST", self.cms(), body)
        body["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self.api.ok("PUT", self.cms(job + "-endpoints"), body)

    def trainer(self, name):
        p = self.api.ok("GET", self.pods(name))
        c = next((c for c in p["status"].get("conditions") or [] if c["type"] == TRAINER), None)
        return c and (c["reason"], c["message"].split(":")[0], c["status"])

    def reports(self, name, reason, run):
        want = (reason, "run %d" % run, "True" if reason == "Running" else "False")
        wait_for(lambda: self.trainer(name) == want, what="%s reports %s" % (name, want))

    def test_a_trainer_waits_at_the_gate_until_its_run_opens(self):
        self.make("w0")
        self.assertEqual(self.trainer("w0"), ("AtGate", "run 0", "False"))
        c = next(c for c in self.api.ok("GET", self.pods("w0"))["status"]["conditions"] if c["type"] == TRAINER)
        self.assertRegex(c["message"], r"^run 0: .+")
        self.endpoints(0, barrier=0)
        self.make("w1")    # the kubelet has handled the ConfigMap before it starts w1
        self.assertEqual(self.trainer("w0"), ("AtGate", "run 0", "False"), "the barrier holds the gate")
        self.endpoints(0)
        self.reports("w0", "Running", 0)
        self.reports("w1", "Running", 0)
        self.make("w2")
        self.assertEqual(self.trainer("w2"), ("Running", "run 0", "True"), "an open run: passes at once")
        self.make("late", run=2)
        self.assertEqual(self.trainer("late"), ("AtGate", "run 2", "False"), "its FLEET_RUN is its floor")

    def test_a_newer_run_kills_the_trainers_of_the_older_one_and_the_gates_open_together(self):
        for n in ("w0", "w1"):
            self.make(n)
        self.endpoints(0)
        self.reports("w1", "Running", 0)
        self.endpoints(1, barrier=1)    # the operator's restart (the pods' relabel does not matter)
        for n in ("w0", "w1"):
            self.reports(n, "AtGate", 1)
            p = self.api.ok("GET", self.pods(n))
            s = main_status(p)
            self.assertEqual((p["status"]["phase"], s["restartCount"]), ("Running", 1))
            self.assertEqual((s["lastState"]["terminated"]["exitCode"], s["lastState"]["terminated"]["reason"]),
                             (137, "Error"))
            self.assertIn("running", s["state"])
        self.endpoints(1)
        for n in ("w0", "w1"):
            self.reports(n, "Running", 1)
            self.assertEqual(main_status(self.api.ok("GET", self.pods(n)))["restartCount"], 1, "killed once")

    def test_a_failed_trainer_waits_for_a_newer_run(self):
        for n in ("w0", "w1"):
            self.make(n)
        self.endpoints(0)
        self.reports("w1", "Running", 0)
        p = self.pod_action("w0", action="end", exitCode=1)
        self.assertEqual(main_status(p)["restartCount"], 1)
        self.assertEqual(self.trainer("w0"), ("AtGate", "run 1", "False"), "run 0 lost a rank: it never rejoins it")
        self.assertEqual(self.trainer("w1"), ("Running", "run 0", "True"))
        self.endpoints(1)    # opened without a barrier: w1 is killed and both pass into run 1
        self.reports("w0", "Running", 1)
        self.reports("w1", "Running", 1)
        self.assertEqual(main_status(self.api.ok("GET", self.pods("w1")))["restartCount"], 1)
        self.assertEqual(main_status(self.api.ok("GET", self.pods("w0")))["restartCount"], 1)

    def test_a_trainer_that_stays_down_has_exited(self):
        self.make("never", policy="Never")
        self.make("fails")
        self.make("done")
        self.endpoints(0)
        for n in ("never", "fails", "done"):
            self.reports(n, "Running", 0)
        self.endpoints(1, barrier=1)
        self.reports("never", "Exited", 0)
        p = self.api.ok("GET", self.pods("never"))
        self.assertEqual(p["status"]["phase"], "Failed", "killed by its liveness probe, not restarted")
        self.assertEqual(main_status(p)["state"]["terminated"]["exitCode"], 137)
        self.reports("done", "AtGate", 1)
        self.pod_action("fails", action="fail", exitCode=1)   # the pod fails as a pod
        self.assertEqual(self.trainer("fails"), ("AtGate", "run 1", "False"), "it ended at the gate")
        self.endpoints(1)
        self.reports("done", "Running", 1)
        self.assertEqual(self.trainer("fails"), ("AtGate", "run 1", "False"), "a failed pod's trainer stays down")
        self.assertEqual(self.pod_action("done", action="succeed")["status"]["phase"], "Succeeded")
        self.assertEqual(self.trainer("done"), ("Exited", "run 1", "False"))

    def test_other_pods_and_configmaps_are_left_alone(self):
        self.api.ok("POST", self.pods(), pod_body("plain", labels={"fleet.paddlepaddle.org/job-name": "j"}))
        self.make("other", job="k")
        self.endpoints(0)               # j's endpoints
        self.api.ok("POST", self.cms(), {"metadata": {"name": "k", "annotations": {
            "fleet.paddlepaddle.org/run": "0"}}})
        self.make("sync")               # the kubelet has handled both ConfigMaps
        self.assertIsNone(self.trainer("plain"))
        self.assertEqual(self.trainer("other"), ("AtGate", "run 0", "False"))
        self.endpoints(0, job="k")
        self.reports("other", "Running", 0)


class TestCommandLine(unittest.TestCase):
    def start(self, *args):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        ready = os.path.join(d, "ready")
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_apiserver.py"), "--listen",
                                 "127.0.0.1:0", "--ready-file", ready] + list(args),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        wait_for(lambda: os.path.exists(ready), timeout=10, what="ready file")
        startup = time.monotonic() - t0
        with open(ready) as f:
            url = f.read()
        return proc, url, startup, d

    def test_ready_file_and_sigterm(self):
        proc, url, startup, _ = self.start("--token", "t1", "--kubelet", "manual", "--watch-cache-size", "50")
        self.assertLess(startup, 1.5)   # typically ~0.2 s; slack for loaded CI machines
        self.assertRegex(url, r"^http://127\.0\.0\.1:\d+\n$")
        api = Raw(url.strip(), token="t1")
        self.assertEqual(api.req("GET", "/api/v1/namespaces/default")[0], 200)
        self.assertEqual(Raw(url.strip()).req("GET", "/api/v1/namespaces/default")[0], 401)
        c, r = api.open_watch("/api/v1/pods?watch=1")     # an open watch must not block shutdown
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(10), 0)
        c.close()

    @unittest.skipUnless(shutil.which("openssl"), "openssl not installed")
    def test_tls(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        cert, key = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        proc, url, _, _ = self.start("--tls-cert", cert, "--tls-key", key, "--token", "sekret")
        self.assertTrue(url.startswith("https://"))
        ctx = ssl.create_default_context(cafile=cert)
        api = Raw(url.strip(), token="sekret", ssl_context=ctx)
        self.assertEqual(api.req("GET", "/version")[0], 200)
        evs, _ = api.watch("/api/v1/namespaces?watch=1&timeoutSeconds=1")
        self.assertIn("default", [e["object"]["metadata"]["name"] for e in evs])
        if KUBECTL:
            kc = os.path.join(d, "kubeconfig")
            with open(kc, "w") as f:
                f.write(KUBECONFIG_TEMPLATE.format(server=url.strip(), extra="certificate-authority: " + cert,
                                                   token="sekret"))
            out = subprocess.run([KUBECTL, "--kubeconfig", kc, "--cache-dir", os.path.join(d, "cache"),
                                  "get", "namespaces"], capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("kube-system", out.stdout)
        proc.terminate()
        self.assertEqual(proc.wait(10), 0)

    @unittest.skipUnless(shutil.which("openssl"), "openssl not installed")
    def test_client_certificate(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        p = lambda n: os.path.join(d, n)   # noqa: E731

        def ossl(*args):
            subprocess.run(["openssl"] + list(args), check=True, capture_output=True)
        ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("ca.key"), "-out", p("ca.crt"),
             "-days", "1", "-subj", "/CN=fake-ca")
        ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p("srv.key"), "-out", p("srv.crt"),
             "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1")
        ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", p("cl.key"), "-out", p("cl.csr"),
             "-subj", "/CN=tester/O=system:masters")
        ossl("x509", "-req", "-in", p("cl.csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"), "-CAcreateserial",
             "-out", p("cl.crt"), "-days", "1")
        proc, url, _, _ = self.start("--tls-cert", p("srv.crt"), "--tls-key", p("srv.key"),
                                     "--client-ca", p("ca.crt"), "--token", "t")
        ctx = ssl.create_default_context(cafile=p("srv.crt"))
        self.assertEqual(Raw(url.strip(), ssl_context=ctx).req("GET", "/api/v1/namespaces")[0], 401)
        ctx.load_cert_chain(p("cl.crt"), p("cl.key"))
        self.assertEqual(Raw(url.strip(), ssl_context=ctx).req("GET", "/api/v1/namespaces")[0], 200)
        proc.terminate()
        self.assertEqual(proc.wait(10), 0)


# ============================================================================
# kubectl
# ============================================================================

KUBECONFIG_TEMPLATE = """apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {server}
    {extra}
contexts:
- name: fake
  context: {{cluster: fake, user: tester, namespace: default}}
current-context: fake
users:
- name: tester
  user: {{token: {token}}}
"""

POD_YAML = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: demo}}
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: ["sleep", "3600"]
"""

CRD_YAML = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: fleetjobs.fleet.paddlepaddle.org
spec:
  group: fleet.paddlepaddle.org
  scope: Namespaced
  names: {plural: fleetjobs, singular: fleetjob, kind: FleetJob, shortNames: [fj]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Workers, type: integer, jsonPath: .spec.workers}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""

FJ_YAML = """apiVersion: fleet.paddlepaddle.org/v1
kind: FleetJob
metadata:
  name: job1
spec:
  workers: {workers}
  image: paddle:2.5
"""


@unittest.skipUnless(KUBECTL, "kubectl not installed")
class TestKubectl(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tempfile.mkdtemp(prefix="fake-kubectl-")
        cls.kubeconfig = os.path.join(cls.dir, "config")
        with open(cls.kubeconfig, "w") as f:
            f.write(KUBECONFIG_TEMPLATE.format(server=cls.srv.url, extra="", token="unused"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, True)
        super().tearDownClass()

    def kubectl(self, *args, ok=True):
        env = dict(os.environ, KUBECONFIG=self.kubeconfig)
        out = subprocess.run([KUBECTL, "--cache-dir", os.path.join(self.dir, "cache"), "-n", self.ns] + list(args),
                             capture_output=True, text=True, timeout=60, env=env)
        if ok:
            self.assertEqual(out.returncode, 0, "kubectl %s: %s%s" % (" ".join(args), out.stdout, out.stderr))
        return out

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_pods(self):
        out = self.kubectl("get", "pods")
        self.assertIn("No resources found", out.stdout + out.stderr)
        out = self.kubectl("create", "-f", self.write("pod.yaml", POD_YAML.format(name="kpod")))
        self.assertIn("pod/kpod created", out.stdout)
        self.running("kpod")
        out = self.kubectl("get", "pods")
        self.assertRegex(out.stdout, r"NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE")
        self.assertRegex(out.stdout, r"kpod\s+1/1\s+Running\s+0")
        pod = json.loads(self.kubectl("get", "pod", "kpod", "-o", "json").stdout)
        self.assertRegex(pod["status"]["podIP"], r"^10\.")
        self.assertEqual(pod["status"]["phase"], "Running")
        out = self.kubectl("get", "pods", "-l", "app=demo", "-o", "wide")
        self.assertIn(pod["status"]["podIP"], out.stdout)
        out = self.kubectl("create", "-f", os.path.join(self.dir, "pod.yaml"), ok=False)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("AlreadyExists", out.stderr)
        out = self.kubectl("delete", "pod", "kpod")
        self.assertIn('"kpod" deleted', out.stdout)
        self.assertEqual(self.api.req("GET", self.pods("kpod"))[0], 404)
        out = self.kubectl("get", "pod", "kpod", ok=False)
        self.assertIn("NotFound", out.stderr)

    def test_apply_crd_and_custom_resource(self):
        self.kubectl("apply", "--validate=false", "-f", self.write("crd.yaml", CRD_YAML))
        out = self.kubectl("apply", "--validate=false", "-f", self.write("fj.yaml", FJ_YAML.format(workers=2)))
        self.assertIn("fleetjob.fleet.paddlepaddle.org/job1 created", out.stdout)
        out = self.kubectl("get", "fj")
        self.assertRegex(out.stdout, r"NAME\s+WORKERS\n")    # Age only when the CRD lists it
        self.assertRegex(out.stdout, r"job1\s+2\s+")
        out = self.kubectl("apply", "--validate=false", "-f", self.write("fj.yaml", FJ_YAML.format(workers=5)))
        self.assertIn("configured", out.stdout)
        fj = json.loads(self.kubectl("get", "fleetjob", "job1", "-o", "json").stdout)
        self.assertEqual((fj["spec"]["workers"], fj["metadata"]["generation"]), (5, 2))
        out = self.kubectl("apply", "--validate=false", "-f", os.path.join(self.dir, "fj.yaml"))
        self.assertIn("unchanged", out.stdout)
        self.kubectl("delete", "fj", "job1")
        self.assertEqual(self.api.req("GET", FJ_PATH % self.ns + "/job1")[0], 404)

    def test_apply_configmap_strategic_merge(self):
        cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: '1', b: '2'}\n"
        self.kubectl("apply", "-f", self.write("cm.yaml", cm))
        self.kubectl("apply", "-f", self.write("cm.yaml", cm.replace("a: '1', ", "")))
        got = self.api.ok("GET", self.cms("settings"))
        self.assertEqual(got["data"], {"b": "2"})
        out = self.kubectl("get", "configmaps", "settings", "-o", "jsonpath={.data.b}")
        self.assertEqual(out.stdout, "2")


# ============================================================================
# python3-kubernetes
# ============================================================================


@unittest.skipUnless(HAVE_KUBERNETES, "python3-kubernetes not importable")
class TestPythonClient(ServerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cfg = kclient.Configuration()
        cfg.host = cls.srv.url
        cls.apiclient = kclient.ApiClient(cfg)
        cls.v1 = kclient.CoreV1Api(cls.apiclient)

    @classmethod
    def tearDownClass(cls):
        cls.apiclient.close()
        super().tearDownClass()

    def test_pods_crud_and_watch(self):
        v1 = self.v1
        listed = v1.list_namespaced_pod(self.ns)
        self.assertEqual(listed.items, [])
        rv = listed.metadata.resource_version
        created = v1.create_namespaced_pod(self.ns, pod_body("py"))
        self.assertEqual(created.status.phase, "Pending")
        w = kwatch.Watch()
        seen, deleted = [], False
        for ev in w.stream(v1.list_namespaced_pod, self.ns, resource_version=rv, timeout_seconds=10):
            pod = ev["object"]
            seen.append((ev["type"], int(pod.metadata.resource_version), pod.status.phase))
            if pod.status.phase == "Running" and pod.status.pod_ip and not deleted:
                deleted = True
                got = v1.read_namespaced_pod("py", self.ns)
                self.assertEqual(got.status.pod_ip, pod.status.pod_ip)
                self.assertTrue(got.status.container_statuses[0].ready)
                v1.delete_namespaced_pod("py", self.ns)
            if ev["type"] == "DELETED":
                w.stop()
        types = [s[0] for s in seen]
        self.assertEqual(types[0], "ADDED")
        self.assertEqual(types[-1], "DELETED")
        self.assertTrue(all(t == "MODIFIED" for t in types[1:-1]), types)
        rvs = [s[1] for s in seen]
        self.assertEqual(rvs, sorted(rvs))
        self.assertIn("Running", [s[2] for s in seen])
        self.assertEqual(v1.list_namespaced_pod(self.ns).items, [])

    def test_errors(self):
        v1 = self.v1
        v1.create_namespaced_config_map(self.ns, {"metadata": {"name": "dup"}, "data": {"a": "b"}})
        with self.assertRaises(kclient.ApiException) as cm:
            v1.create_namespaced_config_map(self.ns, {"metadata": {"name": "dup"}})
        self.assertEqual(cm.exception.status, 409)
        self.assertEqual(json.loads(cm.exception.body)["reason"], "AlreadyExists")
        with self.assertRaises(kclient.ApiException) as cm:
            v1.read_namespaced_pod("nope", self.ns)
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(kclient.ApiException) as cm:
            v1.create_namespaced_pod(self.ns, {"metadata": {"name": "no-containers"}, "spec": {"containers": []}})
        self.assertEqual(cm.exception.status, 422)
        got = v1.read_namespaced_config_map("dup", self.ns)
        got.data = {"a": "c"}
        v1.replace_namespaced_config_map("dup", self.ns, got)
        got.data = {"a": "stale"}
        with self.assertRaises(kclient.ApiException) as cm:
            v1.replace_namespaced_config_map("dup", self.ns, got)
        self.assertEqual(cm.exception.status, 409)
        patched = v1.patch_namespaced_config_map("dup", self.ns, {"data": {"n": "1"}})
        self.assertEqual(patched.data, {"a": "c", "n": "1"})

    def test_custom_objects(self):
        ext = kclient.ApiextensionsV1Api(self.apiclient)
        try:
            ext.create_custom_resource_definition(CRD)
        except kclient.ApiException as e:
            self.assertEqual(e.status, 409)     # another test class of this server may have made it
        co = kclient.CustomObjectsApi(self.apiclient)
        body = {"apiVersion": "fleet.paddlepaddle.org/v1", "kind": "FleetJob", "metadata": {"name": "pyjob"},
                "spec": {"workers": 4}}
        made = co.create_namespaced_custom_object("fleet.paddlepaddle.org", "v1", self.ns, "fleetjobs", body)
        self.assertEqual(made["metadata"]["generation"], 1)
        got = co.get_namespaced_custom_object("fleet.paddlepaddle.org", "v1", self.ns, "fleetjobs", "pyjob")
        self.assertEqual(got["spec"], {"workers": 4})
        co.patch_namespaced_custom_object_status("fleet.paddlepaddle.org", "v1", self.ns, "fleetjobs", "pyjob",
                                                 {"status": {"phase": "Running"}})
        got = co.get_namespaced_custom_object("fleet.paddlepaddle.org", "v1", self.ns, "fleetjobs", "pyjob")
        self.assertEqual(got["status"], {"phase": "Running"})
        lst = co.list_namespaced_custom_object("fleet.paddlepaddle.org", "v1", self.ns, "fleetjobs")
        self.assertEqual([i["metadata"]["name"] for i in lst["items"]], ["pyjob"])
        with self.assertRaises(kclient.ApiException) as cm:
            co.create_namespaced_custom_object("fleet.paddlepaddle.org", "v1", self.ns, "fleetjobs", body)
        self.assertEqual(cm.exception.status, 409)
        co.delete_namespaced_custom_object("fleet.paddlepaddle.org", "v1", self.ns, "fleetjobs", "pyjob")
        with self.assertRaises(kclient.ApiException) as cm:
            co.get_namespaced_custom_object("fleet.paddlepaddle.org", "v1", self.ns, "fleetjobs", "pyjob")
        self.assertEqual(cm.exception.status, 404)

    def test_leases(self):
        coord = kclient.CoordinationV1Api(self.apiclient)
        lease = coord.create_namespaced_lease(self.ns, {"metadata": {"name": "lock"},
                                                        "spec": {"holderIdentity": "a",
                                                                 "leaseDurationSeconds": 15}})
        lease.spec.holder_identity = "b"
        coord.replace_namespaced_lease("lock", self.ns, lease)
        lease.spec.holder_identity = "c"
        with self.assertRaises(kclient.ApiException) as cm:
            coord.replace_namespaced_lease("lock", self.ns, lease)
        self.assertEqual(cm.exception.status, 409)


class TestWorkloadApi(ServerTestCase):
    """scheduling.k8s.io Workloads and PodGroups: served only when asked for (--workload-api), as a
    cluster serves them only with the GenericWorkload gate and runtime-config."""
    server_kwargs = {"workload_api": ["v1alpha1", "v1alpha2"]}
    WORKLOAD = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload", "metadata": {"name": "w"},
                "spec": {"controllerRef": {"apiGroup": "fleet.paddlepaddle.org", "kind": "FleetJob", "name": "w"},
                         "podGroupTemplates": [{"name": "job", "schedulingPolicy": {"gang": {"minCount": 2}}}]}}

    def path(self, version, plural):
        return "/apis/scheduling.k8s.io/%s/namespaces/%s/%s" % (version, self.ns, plural)

    def test_served_only_when_asked_for(self):
        versions = [v["version"] for v in self.api.ok("GET", "/apis/scheduling.k8s.io")["versions"]]
        self.assertEqual(sorted(versions), ["v1", "v1alpha1", "v1alpha2"])
        names = [r["name"] for r in self.api.ok("GET", "/apis/scheduling.k8s.io/v1alpha2")["resources"]]
        self.assertEqual(sorted(names), ["podgroups", "podgroups/status", "workloads"])
        plain = fake_apiserver.FakeApiServer().start()
        self.addCleanup(plain.stop)
        versions = [v["version"] for v in Raw(plain.url).ok("GET", "/apis/scheduling.k8s.io")["versions"]]
        self.assertEqual(versions, ["v1"])
        self.assertEqual(Raw(plain.url).req("GET", "/apis/scheduling.k8s.io/v1alpha2/workloads")[0], 404)

    def test_objects_are_checked_by_the_upstream_types_rules(self):
        st, b = self.api.req("POST", self.path("v1alpha2", "workloads"), self.WORKLOAD)
        self.assertEqual(st, 201, b)
        pod_group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "w-r0"},
                     "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "w", "podGroupTemplateName": "job"}},
                              "schedulingPolicy": {"gang": {"minCount": 2}}}}
        self.assertEqual(self.api.req("POST", self.path("v1alpha2", "podgroups"), pod_group)[0], 201)
        for version, plural, obj, field in (
                ("v1alpha2", "podgroups", {"metadata": {"name": "a"}, "spec": {"schedulingPolicy": {"gang": {}}}},
                 "spec.schedulingPolicy.gang.minCount"),
                ("v1alpha2", "podgroups", {"metadata": {"name": "b"}, "spec": {"schedulingPolicy": {
                    "basic": {}, "gang": {"minCount": 1}}}}, "spec.schedulingPolicy"),
                ("v1alpha2", "podgroups", {"metadata": {"name": "c"}, "spec": {
                    "podGroupTemplateRef": {"workloadName": "w"}, "schedulingPolicy": {"basic": {}}}},
                 "spec.podGroupTemplateRef.workload"),
                ("v1alpha2", "workloads", {"metadata": {"name": "d"}, "spec": {"podGroups": []}},
                 "spec.podGroupTemplates"),
                ("v1alpha1", "workloads", dict(self.WORKLOAD, apiVersion="scheduling.k8s.io/v1alpha1",
                                               metadata={"name": "e"}), "spec.podGroups")):
            with self.subTest(field=field):
                st, b = self.api.req("POST", self.path(version, plural), obj)
                self.assertEqual(st, 422, b)
                self.assertIn(field, [c["field"] for c in b["details"]["causes"]])

    def test_pods_keep_their_scheduling_group(self):
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}],
                                                   "schedulingGroup": {"podGroupName": "w-r0"}}}
        self.assertEqual(self.api.req("POST", self.pods(), pod)[0], 201)
        self.assertEqual(self.api.ok("GET", self.pods("p"))["spec"]["schedulingGroup"], {"podGroupName": "w-r0"})


if __name__ == "__main__":
    unittest.main()
