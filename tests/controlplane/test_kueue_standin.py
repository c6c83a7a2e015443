"""Tests of the fake API server's Kueue stand-in (fakeapi/kueue.py, fakeapi/schemas.py) and of
its kubelet's scheduling gates, node selectors and taints, through HTTP as a client sees them.

Run:  /usr/bin/python3 -m unittest -v test_kueue_standin   (from this directory)

Kueue's CRDs are read from $FLEET_KUEUE_CRDS, else /work/shared/kueue/crds (third-party: never
copied into the repository); the Kueue tests skip themselves when they are absent."""

import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True       # keep the source tree clean
import fake_apiserver  # noqa: E402
from test_fake_apiserver import Raw  # noqa: E402

CRDS = os.environ.get("FLEET_KUEUE_CRDS") or os.path.normpath(os.path.join(HERE, "../../../shared/kueue/crds"))
if not os.path.isdir(CRDS):
    CRDS = "/work/shared/kueue/crds"
HAVE_CRDS = os.path.isfile(os.path.join(CRDS, "kueue.x-k8s.io_workloads.yaml"))

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
WL = KUEUE + "/namespaces/default/workloads"
GPU = "nvidia.com/gpu"


def pod_set(name="worker", count=1, gpus=1, min_count=None, node_selector=None):
    spec = {"containers": [{"name": "main", "image": "busybox:1.36",
                            "resources": {"requests": {GPU: str(gpus), "cpu": "500m"}}}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    ps = {"name": name, "count": count, "template": {"spec": spec}}
    if min_count is not None:
        ps["minCount"] = min_count
    return ps


def workload(name, pod_sets, queue="q", priority=None, job_uid=None):
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": name, "labels": {"kueue.x-k8s.io/job-uid": job_uid or name + "-uid"}},
          "spec": {"queueName": queue, "podSets": pod_sets}}
    if priority is not None:
        wl["spec"]["priority"] = priority
    return wl


def condition(obj, ctype):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def wait_for(fn, timeout=10.0):
    """Polls fn until it returns something true (the kubelet stand-in runs asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        out = fn()
        if out or time.monotonic() > deadline:
            return out
        time.sleep(0.01)


class Base(unittest.TestCase):
    def setUp(self):
        self.srv = fake_apiserver.FakeApiServer(nodes=4).start()
        self.addCleanup(self.srv.stop)
        self.api = Raw(self.srv.url)

    def post(self, path, body, expect=(200, 201)):
        return self.api.ok("POST", path, body, expect=expect)

    def patch_status(self, name, status):
        return self.api.ok("PATCH", WL + "/" + name + "/status", {"status": status},
                           ctype="application/merge-patch+json")


@unittest.skipUnless(HAVE_CRDS, "Kueue's CRDs not found (set FLEET_KUEUE_CRDS)")
class KueueBase(Base):
    def setUp(self):
        super().setUp()
        self.post("/fake/v1/config", {"kueue": {"crds": CRDS}})

    def settle(self):
        self.assertTrue(self.api.ok("GET", "/fake/v1/kueue")["settled"])

    def wl(self, name):
        self.settle()
        return self.api.ok("GET", WL + "/" + name)

    def queue(self, flavors, preemption=False, cq="cq"):
        """ResourceFlavors {name: nodeLabels}, a ClusterQueue with one resourceGroup over cpu and
        GPUs (flavors in order, each with its GPU quota and 100 CPUs), and LocalQueue q."""
        for name, (labels, _gpus) in flavors.items():
            self.post(KUEUE + "/resourceflavors", {"metadata": {"name": name}, "spec": {"nodeLabels": labels}})
        spec = {"resourceGroups": [{"coveredResources": ["cpu", GPU], "flavors": [
            {"name": name, "resources": [{"name": "cpu", "nominalQuota": "100"},
                                         {"name": GPU, "nominalQuota": gpus}]}
            for name, (_labels, gpus) in flavors.items()]}]}
        if preemption:
            spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
        self.post(KUEUE + "/clusterqueues", {"metadata": {"name": cq}, "spec": spec})
        self.post(KUEUE + "/namespaces/default/localqueues", {"metadata": {"name": "q"}, "spec": {"clusterQueue": cq}})

    def assert_condition(self, wl, ctype, status, reason, message=None):
        c = condition(wl, ctype)
        self.assertIsNotNone(c, "%s has no %s condition: %s" % (wl["metadata"]["name"], ctype, wl.get("status")))
        self.assertEqual((c["status"], c["reason"]), (status, reason), c)
        if message is not None:
            self.assertEqual(c["message"], message)

    def release(self, name):
        """The job controller's write once its pods are gone (design 2.5 step 2)."""
        evicted = condition(self.wl(name), "Evicted")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conds = [{"type": "Requeued", "status": "True", "reason": evicted["reason"], "message": evicted["message"],
                  "lastTransitionTime": now},
                 {"type": "QuotaReserved", "status": "False", "reason": "PendingEvaluation",
                  "message": evicted["message"], "lastTransitionTime": now},
                 {"type": "Admitted", "status": "False", "reason": "NoReservation",
                  "message": "The workload has no reservation", "lastTransitionTime": now}]
        wl = self.wl(name)
        keep = [c for c in wl["status"]["conditions"] if c["type"] not in ("Requeued", "QuotaReserved", "Admitted")]
        wl["status"]["conditions"] = keep + conds
        del wl["status"]["admission"]
        return self.api.ok("PUT", WL + "/" + name + "/status", wl)

    def finish(self, name):
        wl = self.wl(name)
        wl["status"]["conditions"].append({"type": "Finished", "status": "True", "reason": "Succeeded",
                                           "message": "done", "lastTransitionTime": "2026-01-01T00:00:00Z"})
        return self.api.ok("PUT", WL + "/" + name + "/status", wl)


class SchemaTest(KueueBase):
    def invalid(self, body, path=WL, method="POST"):
        st, out = self.api.req(method, path, body)
        self.assertEqual((st, out.get("reason")), (422, "Invalid"), out)
        return {c["field"]: c for c in out["details"]["causes"]}

    def test_malformed_workloads_are_refused_naming_the_field(self):
        causes = self.invalid(workload("caps", [pod_set(name="Worker")]))
        self.assertIn("should match", causes["spec.podSets[0].name"]["message"])
        causes = self.invalid(workload("many", [pod_set(name="p%d" % i) for i in range(19)]))
        self.assertEqual(causes["spec.podSets"]["reason"], "FieldValueTooMany")
        body = workload("ref", [pod_set()])
        body["spec"]["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "hi"}
        self.assertIn("priority should not be nil", self.invalid(body)["spec.priority"]["message"])
        causes = self.invalid(workload("mins", [pod_set("a", 4, min_count=2), pod_set("b", 4, min_count=2)]))
        self.assertIn("at most one podSet can use minCount", causes["spec.podSets"]["message"])
        causes = self.invalid(workload("twice", [pod_set("a"), pod_set("a")]))
        self.assertEqual(causes["spec.podSets[1]"]["reason"], "FieldValueDuplicate")
        causes = self.invalid(workload("q", [{"name": "w", "count": "two", "template": {"spec": {}}}]))
        self.assertEqual(causes["spec.podSets[0].count"]["message"], 'Invalid value: "string": spec.podSets[0].count '
                         'in body must be of type integer: "two"')
        self.assertIn("spec.podSets[0].template.spec.containers", causes)

    def test_a_well_formed_workload_is_pruned_and_defaulted(self):
        body = workload("ok", [{"template": {"spec": {"containers": [{"name": "c", "image": "i", "bogus": 1}]}}}])
        body["spec"]["notAField"] = True
        out = self.post(WL, body)
        ps = out["spec"]["podSets"][0]
        self.assertEqual((ps["name"], ps["count"]), ("main", 1))              # the CRD's defaults
        self.assertNotIn("notAField", out["spec"])                            # pruned, as the server does
        self.assertNotIn("bogus", ps["template"]["spec"]["containers"][0])
        self.assertIs(out["spec"]["active"], True)

    def test_status_writes_follow_kueues_rules(self):
        self.post(WL, workload("w", [pod_set()]))
        now = "2026-01-01T00:00:00Z"
        reserved = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "m",
                    "lastTransitionTime": now}
        st, out = self.api.req("PATCH", WL + "/w/status", {"status": {"conditions": [reserved]}},
                               ctype="application/merge-patch+json")
        self.assertEqual(st, 422, out)
        self.assertEqual(out["details"]["causes"][0]["field"], "status.admission")
        bad = dict(reserved, status="False", reason="not camel")
        st, out = self.api.req("PATCH", WL + "/w/status", {"status": {"conditions": [bad]}},
                               ctype="application/merge-patch+json")
        self.assertEqual(out["details"]["causes"][0]["field"], "status.conditions[0].reason")
        admission = {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "worker", "flavors": {GPU: "a"}, "resourceUsage": {GPU: "1"}, "count": 1}]}
        self.patch_status("w", {"conditions": [reserved], "admission": admission})
        admission["podSetAssignments"][0]["count"] = 2
        st, out = self.api.req("PATCH", WL + "/w/status", {"status": {"admission": admission}},
                               ctype="application/merge-patch+json")
        self.assertEqual(out["details"]["causes"][0]["field"], "status.admission", out)
        self.patch_status("w", {"reclaimablePods": [{"name": "worker", "count": 1}]})
        st, out = self.api.req("PATCH", WL + "/w/status", {"status": {"reclaimablePods": [{"name": "worker",
                                                                                            "count": 0}]}},
                               ctype="application/merge-patch+json")
        self.assertEqual(out["details"]["causes"][0]["field"], "status.reclaimablePods[worker].count", out)
        wl = self.api.ok("GET", WL + "/w")
        wl["spec"]["podSets"][0]["count"] = 3
        st, out = self.api.req("PUT", WL + "/w", wl)
        self.assertEqual(out["details"]["causes"][0]["field"], "spec.podSets", out)


class AdmissionTest(KueueBase):
    def test_the_second_flavor_takes_what_the_first_cannot(self):
        self.queue({"a100": ({"gpu": "a100"}, 8), "h100": ({"gpu": "h100"}, 8)})
        self.post(WL, workload("first", [pod_set(count=8)]))
        self.settle()
        self.post(WL, workload("second", [pod_set(count=4)]))
        first, second = self.wl("first"), self.wl("second")
        self.assertEqual(first["status"]["admission"]["podSetAssignments"][0]["flavors"], {"cpu": "a100", GPU: "a100"})
        self.assertEqual(second["status"]["admission"], {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "worker", "flavors": {"cpu": "h100", GPU: "h100"}, "resourceUsage": {"cpu": "2", GPU: "4"},
             "count": 4}]})
        self.assert_condition(second, "QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq")
        self.assert_condition(second, "Admitted", "True", "Admitted")

    def test_a_flavor_whose_labels_conflict_with_the_node_selector_is_skipped(self):
        self.queue({"a100": ({"gpu": "a100"}, 8), "h100": ({"gpu": "h100"}, 8)})
        self.post(WL, workload("w", [pod_set(node_selector={"gpu": "h100"})]))
        self.assertEqual(self.wl("w")["status"]["admission"]["podSetAssignments"][0]["flavors"][GPU], "h100")

    def test_untolerated_flavor_taints_and_uncovered_resources_keep_a_workload_pending(self):
        self.queue({"a100": ({}, 8)})
        self.api.ok("PATCH", KUEUE + "/resourceflavors/a100", {"spec": {"nodeTaints": [
            {"key": "gpu", "value": "true", "effect": "NoSchedule"}]}}, ctype="application/merge-patch+json")
        self.post(WL, workload("tainted", [pod_set()]))
        self.assert_condition(self.wl("tainted"), "QuotaReserved", "False", "Pending",
                              "couldn't assign flavors to pod set worker: untolerated taint gpu=true:NoSchedule "
                              "in flavor a100")
        tolerant = workload("tolerant", [pod_set()])
        tolerant["spec"]["podSets"][0]["template"]["spec"]["tolerations"] = [
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
        self.post(WL, tolerant)
        self.assert_condition(self.wl("tolerant"), "QuotaReserved", "True", "QuotaReserved")
        memory = workload("memory", [pod_set()])
        memory["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1Gi"
        memory["spec"]["podSets"][0]["template"]["spec"]["tolerations"] = tolerant["spec"]["podSets"][0][
            "template"]["spec"]["tolerations"]
        self.post(WL, memory)
        self.assert_condition(self.wl("memory"), "QuotaReserved", "False", "Pending",
                              "couldn't assign flavors to pod set worker: resource memory unavailable in ClusterQueue")

    def test_over_quota_waits_with_kueues_message_until_quota_is_freed(self):
        self.queue({"a100": ({}, 8)})
        self.post(WL, workload("first", [pod_set(count=8)]))
        self.settle()
        self.post(WL, workload("second", [pod_set(count=8)]))
        second = self.wl("second")
        self.assert_condition(second, "QuotaReserved", "False", "Pending",
                              "couldn't assign flavors to pod set worker: insufficient unused quota for "
                              "nvidia.com/gpu in flavor a100, 8 more needed")
        self.assertNotIn("admission", second["status"])
        self.assertEqual(second["status"]["resourceRequests"],
                         [{"name": "worker", "resources": {"cpu": "4", GPU: "8"}}])
        self.finish("first")
        self.assert_condition(self.wl("second"), "QuotaReserved", "True", "QuotaReserved")

    def test_partial_admission_takes_the_largest_count_that_fits(self):
        self.queue({"a100": ({}, 3)})
        self.post(WL, workload("elastic", [pod_set(count=4, min_count=2)]))
        psa = self.wl("elastic")["status"]["admission"]["podSetAssignments"][0]
        self.assertEqual((psa["count"], psa["resourceUsage"][GPU]), (3, "3"))

    def test_a_missing_local_queue_is_reported(self):
        self.post(WL, workload("lost", [pod_set()], queue="nope"))
        self.assert_condition(self.wl("lost"), "QuotaReserved", "False", "Misconfigured",
                              "LocalQueue nope is terminating or missing")

    def test_deactivation_evicts_and_frees_the_quota(self):
        self.queue({"a100": ({}, 8)})
        self.post(WL, workload("first", [pod_set(count=8)]))
        self.settle()
        self.post(WL, workload("second", [pod_set(count=8)]))
        self.api.ok("PATCH", WL + "/first", {"spec": {"active": False}}, ctype="application/merge-patch+json")
        self.assert_condition(self.wl("first"), "Evicted", "True", "Deactivated", "The workload is deactivated")
        self.assert_condition(self.wl("second"), "QuotaReserved", "True", "QuotaReserved")

    def test_the_control_api_evicts_with_a_given_reason(self):
        self.queue({"a100": ({}, 8)})
        self.post(WL, workload("w", [pod_set()]))
        self.settle()
        self.post("/fake/v1/kueue", {"action": "evict", "namespace": "default", "name": "w",
                                     "reason": "PodsReadyTimeout", "message": "Exceeded the PodsReady timeout"})
        wl = self.wl("w")
        self.assert_condition(wl, "Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout")
        self.assert_condition(wl, "QuotaReserved", "True", "QuotaReserved")   # the job controller releases it


class ControlApiTest(KueueBase):
    def test_bad_control_requests_are_refused(self):
        st, out = self.api.req("POST", "/fake/v1/config", {"kueue": {"crds": "/nonexistent"}})
        self.assertEqual(st, 400, out)
        st, out = self.api.req("POST", "/fake/v1/config", {"validateGroups": "kueue.x-k8s.io"})
        self.assertEqual(st, 400, out)
        st, out = self.api.req("POST", "/fake/v1/kueue", {"action": "evict", "name": "absent", "reason": "X"})
        self.assertEqual(st, 404, out)
        self.post(WL, workload("w", [pod_set()]))      # pending: no LocalQueue
        st, out = self.api.req("POST", "/fake/v1/kueue", {"action": "evict", "name": "w", "reason": "X"})
        self.assertEqual(st, 409, out)
        st, out = self.api.req("POST", "/fake/v1/kueue", {"action": "evict", "name": "w", "reason": "not camel"})
        self.assertEqual(st, 400, out)
        st, out = self.api.req("POST", "/fake/v1/kueue", {"action": "dance"})
        self.assertEqual(st, 400, out)
        self.assertEqual(self.api.ok("GET", "/fake/v1/config")["validateGroups"], ["kueue.x-k8s.io"])


class PreemptionTest(KueueBase):
    def test_a_higher_priority_workload_preempts_and_waits_for_the_quota_release(self):
        self.queue({"a100": ({}, 8)}, preemption=True)
        self.post(WL, workload("low", [pod_set(count=8)], priority=10))
        self.settle()
        high = self.post(WL, workload("high", [pod_set(count=8)], priority=100, job_uid="job-high"))
        message = ("Preempted to accommodate a workload (UID: %s, JobUID: job-high) due to prioritization in the "
                   "ClusterQueue; preemptor path: /cq; preemptee path: /cq" % high["metadata"]["uid"])
        low = self.wl("low")
        self.assert_condition(low, "Evicted", "True", "Preempted", message)
        self.assert_condition(low, "Preempted", "True", "InClusterQueue", message)
        self.assert_condition(low, "QuotaReserved", "True", "QuotaReserved")   # the stand-in frees nothing
        events = self.api.ok("GET", "/api/v1/namespaces/default/events")["items"]
        self.assertEqual([(e["reason"], e["involvedObject"]["name"], e["message"]) for e in events],
                         [("Preempted", "low", message)])
        waiting = ("couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in "
                   "flavor a100, 8 more needed. Pending the preemption of 1 workload(s)")
        self.assert_condition(self.wl("high"), "QuotaReserved", "False", "WaitingForPreemptedWorkloads", waiting)

        self.release("low")
        self.assert_condition(self.wl("high"), "QuotaReserved", "True", "QuotaReserved")
        low = self.wl("low")
        self.assert_condition(low, "QuotaReserved", "False", "Pending")
        self.assertEqual(len(self.api.ok("GET", "/api/v1/namespaces/default/events")["items"]), 1)

        self.finish("high")
        low = self.wl("low")
        self.assert_condition(low, "QuotaReserved", "True", "QuotaReserved")
        self.assert_condition(low, "Evicted", "False", "QuotaReserved", "Previously: " + message)
        self.assert_condition(low, "Preempted", "False", "QuotaReserved", "Previously: " + message)

    def test_equal_priority_does_not_preempt(self):
        self.queue({"a100": ({}, 8)}, preemption=True)
        self.post(WL, workload("one", [pod_set(count=8)], priority=10))
        self.settle()
        self.post(WL, workload("two", [pod_set(count=8)], priority=10))
        self.assert_condition(self.wl("two"), "QuotaReserved", "False", "Pending")
        self.assertIsNone(condition(self.wl("one"), "Evicted"))


class TopologyTest(KueueBase):
    RACK, INDEX = "example.com/rack", "fleet.paddlepaddle.org/index"

    def tas_workload(self, name):
        ps = {"name": "worker", "count": 4, "topologyRequest": {"required": self.RACK, "podIndexLabel": self.INDEX},
              "template": {"spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                                     "resources": {"requests": {"cpu": "8"}}}]}}}
        return self.post(WL, workload(name, [ps]))

    def test_ranks_fill_one_rack_node_by_node_and_pods_are_ungated_there(self):
        for i, node in enumerate(["node-0", "node-1", "node-2", "node-3"]):   # 16 CPUs each: two pods a node
            self.post("/fake/v1/nodes/" + node, {"labels": {self.RACK: "r%d" % (i // 2 + 1)}})
        self.post(KUEUE + "/topologies", {"metadata": {"name": "default"}, "spec": {"levels": [
            {"nodeLabel": self.RACK}, {"nodeLabel": "kubernetes.io/hostname"}]}})
        self.post(KUEUE + "/resourceflavors", {"metadata": {"name": "tas"}, "spec": {"topologyName": "default"}})
        self.post(KUEUE + "/clusterqueues", {"metadata": {"name": "cq"}, "spec": {"resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "tas", "resources": [
                {"name": "cpu", "nominalQuota": "96"}]}]}]}})
        self.post(KUEUE + "/namespaces/default/localqueues",
                  {"metadata": {"name": "q"}, "spec": {"clusterQueue": "cq"}})
        self.tas_workload("a")
        self.settle()
        self.tas_workload("b")

        def placed(name):
            return self.wl(name)["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
        self.assertEqual(placed("a"), {"levels": ["kubernetes.io/hostname"], "slices": [{
            "domainCount": 2, "valuesPerLevel": [{"individual": {"roots": ["node-0", "node-1"]}}],
            "podCounts": {"individual": [2, 2]}}]})
        self.assertEqual(placed("b")["slices"][0]["valuesPerLevel"][0]["individual"]["roots"], ["node-2", "node-3"])
        self.tas_workload("c")     # quota left, but no rack has room for four more
        self.assert_condition(self.wl("c"), "QuotaReserved", "False", "Pending",
                              "couldn't assign flavors to pod set worker: topology default doesn't allow to fit "
                              "any of 4 pod(s)")

        for rank in (3, 2, 1, 0):
            self.post("/api/v1/namespaces/default/pods", {
                "metadata": {"name": "a-%d" % rank, "annotations": {"kueue.x-k8s.io/workload": "a"},
                             "labels": {self.INDEX: str(rank), "kueue.x-k8s.io/podset": "worker"}},
                "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/topology"}],
                         "containers": [{"name": "main", "image": "busybox:1.36"}]}})
        self.settle()
        for rank, node in ((0, "node-0"), (1, "node-0"), (2, "node-1"), (3, "node-1")):
            pod = wait_for(lambda: (lambda p: p if p["spec"].get("nodeName") else None)(
                self.api.ok("GET", "/api/v1/namespaces/default/pods/a-%d" % rank)))
            self.assertEqual((pod["spec"]["nodeSelector"], pod["spec"]["nodeName"]),
                             ({"kubernetes.io/hostname": node}, node))
            self.assertNotIn("schedulingGates", pod["spec"])


class KubeletSchedulingTest(Base):
    PODS = "/api/v1/namespaces/default/pods"

    def pod(self, name, **spec):
        body = {"metadata": {"name": name}, "spec": dict(containers=[{"name": "c", "image": "busybox:1.36"}], **spec)}
        return self.post(self.PODS, body)

    def running(self, name):
        return wait_for(lambda: self.api.ok("GET", self.PODS + "/" + name)["status"].get("phase") == "Running")

    def test_gated_pods_stay_pending_until_ungated(self):
        gated = self.pod("gated", schedulingGates=[{"name": "kueue.x-k8s.io/topology"}])
        self.assertEqual(condition(gated, "PodScheduled")["reason"], "SchedulingGated")
        self.pod("plain")
        self.assertTrue(self.running("plain"))     # the kubelet took its tasks in order: "gated" was seen
        gated = self.api.ok("GET", self.PODS + "/gated")
        self.assertNotIn("nodeName", gated["spec"])
        self.assertEqual(gated["status"]["phase"], "Pending")
        self.api.ok("PATCH", self.PODS + "/gated", {"spec": {"schedulingGates": None}},
                    ctype="application/merge-patch+json")
        self.assertTrue(self.running("gated"))

    def test_node_selector_and_taints_choose_the_node(self):
        self.post("/fake/v1/nodes/node-2", {"labels": {"gpu": "a100"}})
        self.post("/fake/v1/nodes/node-1", {"labels": {"gpu": "h100"},
                                            "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]})
        self.pod("a100", nodeSelector={"gpu": "a100"})
        self.assertTrue(self.running("a100"))
        self.assertEqual(self.api.ok("GET", self.PODS + "/a100")["spec"]["nodeName"], "node-2")
        self.pod("h100", nodeSelector={"gpu": "h100"})
        why = wait_for(lambda: condition(self.api.ok("GET", self.PODS + "/h100"), "PodScheduled"))
        self.assertEqual((why["status"], why["reason"]), ("False", "Unschedulable"))
        self.assertEqual(why["message"], "0/4 nodes are available: 1 node(s) had untolerated taint {gpu: true}, "
                         "3 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: "
                         "4 Preemption is not helpful for scheduling.")
        self.pod("tolerant", nodeSelector={"gpu": "h100"},
                 tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])
        self.assertTrue(self.running("tolerant"))
        self.api.ok("PATCH", "/api/v1/nodes/node-3", {"metadata": {"labels": {"gpu": "h100"}}},
                    ctype="application/merge-patch+json")     # a node through the API: the pod is tried again
        self.assertTrue(self.running("h100"))
        self.assertEqual(self.api.ok("GET", self.PODS + "/h100")["spec"]["nodeName"], "node-3")


if __name__ == "__main__":
    unittest.main()
