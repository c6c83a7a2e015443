"""Elastic FleetJobs (issue 18) in real containers, with a real etcd.

The etcd is the chart's own (`etcd.enabled`): its StatefulSet's pod template, rendered by
`helm template`, runs as a pod from localhost/fleetjob/etcd (scripts/images.sh). The jobs reach it
at its pod address: this cluster has no DNS and no Services, and the chart's etcd listens on its
pod's address, so `spec.elastic.etcdEndpoint` is `<its podIP>:2379` (on a real cluster the Service
name). Each worker pod runs fleetrun in PaddleCloud style with the operator's elastic env, and
fleetrun runs examples/collective_gloo/train.py: fleet_runtime's Gloo all-reduce over the pods'
addresses, restarted by fleetrun with new ranks on every change of members.

Two nodes: the starvation test places workers one per node (required pod anti-affinity) and takes
a node away from them.

Run (ctest does):  FLEET_BUILD_DIR=build /usr/bin/python3 -m unittest -v test_elastic
The recovery benchmark: bench/elastic_recovery_containers.py (docs/benchmarks.md).
"""

import json
import os
import re
import subprocess
import time
import unittest

import yaml

from cluster import BASE_IMAGE, IMAGES, ROOT, VERSION, require, wait_for
from test_fleetjob import HELM, JOB_LABEL, OPERATOR_NS, OperatorInContainers, fleetjob, trainer

ETCD_IMAGE = "fleetjob/etcd:%s" % VERSION
ETCD_POD = "fleetjob-etcd-0"
GENERATION = re.compile(r"elastic: starting generation (\d+) with \d+ nodes \(([^)]*)\)")
TRAIN = "/opt/fleetjob/examples/collective_gloo/train.py"
# Steps of one generation: each change of members starts the script again, and the last
# generation runs them all. Long enough that a change lands mid-run on a loaded machine
# (a replacement pod took about 10 s to join on a loaded 2-core machine; 10000 steps are about
# 30 s for 2 workers there).
STEPS = int(os.environ.get("FLEET_ELASTIC_TEST_STEPS", "10000"))


def elastic_job(name, replicas, etcd, steps=STEPS, min_replicas=2, max_replicas=4, timeout_seconds=60,
                labels=None, **pod_spec):
    """A collective FleetJob of `replicas` workers, each running fleetrun on the Gloo example.
    Without `etcd` it is the same job, not elastic (the benchmark's whole-job restart)."""
    env = [{"name": "FLEET_EXAMPLE_STEPS", "value": str(steps)},
           {"name": "FLEET_EXAMPLE_LOG_EVERY", "value": str(steps)}]
    template = {"spec": dict({"containers": [trainer(["fleetrun", "--grace_period=2", TRAIN], env=env)]},
                             **pod_spec)}
    if labels:
        template["metadata"] = {"labels": labels}
    spec = {"runPolicy": {"backoffLimit": 3}}
    if etcd:
        spec["elastic"] = {"minReplicas": min_replicas, "maxReplicas": max_replicas, "etcdEndpoint": etcd,
                           "timeoutSeconds": timeout_seconds}
    return fleetjob(name, "collective", worker={"replicas": replicas, "restartPolicy": "ExitCode",
                                                "template": template}, **spec)


def start_etcd(cluster):
    """The chart's etcd (etcd.enabled), its StatefulSet's pod template run as one pod (the test
    control plane stores StatefulSets without a controller); returns its client address."""
    rendered = subprocess.run([HELM, "template", "fleetjob", os.path.join(ROOT, "charts", "fleetjob"),
                               "--namespace", OPERATOR_NS, "--set", "etcd.enabled=true",
                               "--show-only", "templates/etcd.yaml"],
                              capture_output=True, text=True, check=True).stdout
    sts = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "StatefulSet")
    template = sts["spec"]["template"]
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": dict(template["metadata"], name=ETCD_POD),
                   "spec": template["spec"]}, OPERATOR_NS)
    pod = wait_for("etcd ready", lambda: (lambda p: p if p and any(
        k["type"] == "Ready" and k["status"] == "True" for k in p["status"].get("conditions", [])) else None)(
        cluster.get("pod", ETCD_POD, OPERATOR_NS)), timeout=90)
    return pod["status"]["podIP"] + ":2379"


class ElasticInContainersTest(OperatorInContainers):
    nodes = 2

    @classmethod
    def setUpClass(cls):
        require([ETCD_IMAGE])
        super().setUpClass()
        try:
            cls.etcd = start_etcd(cls.cluster)
        except BaseException:
            cls.cluster.close()
            raise

    # ---- helpers ------------------------------------------------------------------------
    def workers(self, job):
        """The job's worker pods by name."""
        return {p["metadata"]["name"]: p for p in self.role_pods(job, "worker")}

    def generations(self, pod):
        """[(generation, {hosts})] that fleetrun in `pod` started, from its log."""
        log = self.cluster.kubectl("logs", pod, "-c", "trainer", check=False)
        return [(int(n), set(hosts.split(","))) for n, hosts in GENERATION.findall(log)]

    def wait_generation(self, job, names, timeout=120):
        """Waits until every pod of `names` runs and its fleetrun started trainers for exactly these
        pods (their addresses); returns the pods by name."""
        def formed():
            pods = self.workers(job)
            if not all(n in pods and pods[n]["status"].get("phase") == "Running" and pods[n]["status"].get("podIP")
                       for n in names):
                return None
            hosts = {pods[n]["status"]["podIP"] for n in names}
            return pods if all(any(h == hosts for _, h in self.generations(n)) for n in names) else None
        try:
            return wait_for("%s: fleetrun in %s training together" % (job, sorted(names)), formed, timeout=timeout,
                            poll=0.5)
        except AssertionError:
            for n in names:
                print("--- %s:\n%s" % (n, self.cluster.kubectl("logs", n, "-c", "trainer", check=False)[-3000:]))
            raise

    def wait_members(self, job, names):
        """The job's status once it lists `names` as its members (the operator follows the pods)."""
        return wait_for("%s: status.elastic.members %s" % (job, names), lambda: (lambda st: st if st.get(
            "elastic", {}).get("members") == names else None)(self.job(job)["status"]), timeout=30)

    def events(self, job, reason):
        items = json.loads(self.cluster.kubectl("get", "events", "-o", "json"))["items"]
        return [e["message"] for e in items
                if e.get("involvedObject", {}).get("name") == job and e.get("reason") == reason]

    def assert_kept_their_run(self, job, before, survivors, run):
        """The survivors are the same pods (uid), their containers never restarted, no new run."""
        status = job["status"]
        self.assertEqual(status.get("run"), run, json.dumps(status, indent=1))
        self.assertEqual(status.get("restartCount", 0), 0, json.dumps(status, indent=1))
        after = self.workers(job["metadata"]["name"])
        for n in survivors:
            self.assertEqual(after[n]["metadata"]["uid"], before[n]["metadata"]["uid"], "%s was replaced" % n)
            self.assertEqual(sum(s.get("restartCount", 0) for s in after[n]["status"]["containerStatuses"]), 0, n)
            self.assertNotIn("ABORT", self.cluster.kubectl("logs", n, "-c", "trainer"), n)

    # ---- the tests ----------------------------------------------------------------------
    def test_a_lost_worker_pod_is_replaced_alone_and_the_job_succeeds_in_its_run(self):
        """3 workers (2..4); worker 1 is deleted mid-run (as an eviction does: SIGTERM, then gone).
        The two others re-rendezvous without it, the operator creates it again in the same run, all
        three train together again, and the job succeeds with no whole-job restart."""
        c = self.cluster
        c.apply(elastic_job("lost", 3, self.etcd))
        names = ["lost-worker-0", "lost-worker-1", "lost-worker-2"]
        before = self.wait_generation("lost", names)
        status = self.wait_members("lost", names)
        run, rendezvous = status["run"], status["elastic"]["rendezvous"]

        t0 = time.monotonic()
        c.kubectl("delete", "pod", "lost-worker-1", "--wait=false")
        survivors = ["lost-worker-0", "lost-worker-2"]
        self.wait_generation("lost", survivors)
        t_survivors = time.monotonic() - t0
        pods = wait_for("lost-worker-1 replaced", lambda: (lambda ps: ps if "lost-worker-1" in ps and ps[
            "lost-worker-1"]["metadata"]["uid"] != before["lost-worker-1"]["metadata"]["uid"] else None)(
            self.workers("lost")), timeout=60)
        self.wait_generation("lost", names)
        print("\nlost: worker 1 deleted -> the survivors' fleetrun restarted as 2 in %.1f s, all 3 again in %.1f s"
              " (seen by polling the logs)" % (t_survivors, time.monotonic() - t0))
        status = self.wait_members("lost", names)
        self.assertEqual(status["phase"], "Running")
        self.assertGreaterEqual(status["elastic"]["rendezvous"], rendezvous + 2, "without it, then with it again")

        job = self.wait_job("lost")
        self.assertEqual(job["status"]["phase"], "Succeeded", json.dumps(job["status"], indent=1))
        self.assert_kept_their_run(job, before, survivors, run)
        self.assertNotEqual(pods["lost-worker-1"]["status"].get("podIP"), before["lost-worker-1"]["status"]["podIP"])
        changes = self.events("lost", "MembershipChanged")
        self.assertTrue(any(m.startswith("lost-worker-1 left: 2 worker(s) running") for m in changes), changes)
        c.kubectl("delete", "fleetjob", "lost", "--wait=true", timeout=120)

    def test_raising_replicas_adds_a_worker_without_a_new_run(self):
        """2 workers (2..4), then `kubectl patch` to 3: a third pod joins, all three train together,
        and the first two keep their pods and run."""
        c = self.cluster
        c.apply(elastic_job("grow", 2, self.etcd))
        before = self.wait_generation("grow", ["grow-worker-0", "grow-worker-1"])
        status = self.wait_members("grow", ["grow-worker-0", "grow-worker-1"])
        run, rendezvous = status["run"], status["elastic"]["rendezvous"]

        c.kubectl("patch", "fleetjob", "grow", "--type=merge", "-p", '{"spec":{"worker":{"replicas":3}}}')
        names = ["grow-worker-0", "grow-worker-1", "grow-worker-2"]
        self.wait_generation("grow", names)
        status = self.wait_members("grow", names)
        self.assertGreater(status["elastic"]["rendezvous"], rendezvous)

        job = self.wait_job("grow")
        self.assertEqual(job["status"]["phase"], "Succeeded", json.dumps(job["status"], indent=1))
        self.assert_kept_their_run(job, before, names[:2], run)
        self.assertTrue(any("2 -> 3" in m for m in self.events("grow", "Scaling")), self.events("grow", "Scaling"))
        c.kubectl("delete", "fleetjob", "grow", "--wait=true", timeout=120)

    def test_a_job_starved_below_its_minimum_fails_after_its_timeout(self):
        """2 workers (2..3), one per node (required anti-affinity). Another pod takes worker 1's node
        and worker 1 is deleted: its replacement cannot be scheduled, the survivor waits alone, and
        after timeoutSeconds the job fails with ElasticBelowMinimum."""
        c = self.cluster
        labels = {"fleetjob-test": "one-per-node"}
        one_per_node = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": labels}, "topologyKey": "kubernetes.io/hostname"}]}}
        timeout = 6
        c.apply(elastic_job("starved", 2, self.etcd, steps=1000000, max_replicas=3, timeout_seconds=timeout,
                            labels=labels, affinity=one_per_node))
        before = self.wait_generation("starved", ["starved-worker-0", "starved-worker-1"])
        node = before["starved-worker-1"]["spec"]["nodeName"]
        c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "node-taker", "labels": labels},
                 "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                          "containers": [{"name": "sleep", "image": BASE_IMAGE, "command": ["sleep", "600"]}]}})
        c.wait_phase("node-taker", ["Running"])

        t0 = time.monotonic()
        c.kubectl("delete", "pod", "starved-worker-1", "--wait=false")
        wait_for("starved-worker-1 recreated and unschedulable", lambda: (lambda p: p if p and p["metadata"][
            "uid"] != before["starved-worker-1"]["metadata"]["uid"] and not p["spec"].get("nodeName") else None)(
            c.get("pod", "starved-worker-1")), timeout=60)
        job = self.wait_job("starved", timeout=timeout + 60)
        waited = time.monotonic() - t0
        failed = next(k for k in job["status"]["conditions"] if k["type"] == "Failed")
        self.assertEqual(failed["reason"], "ElasticBelowMinimum", json.dumps(job["status"], indent=1))
        self.assertGreaterEqual(waited, timeout, "it waited timeoutSeconds below the minimum first")
        print("\nstarved: worker deleted -> Failed (ElasticBelowMinimum, timeoutSeconds %d) in %.1f s" % (timeout, waited))
        c.kubectl("delete", "pod", "node-taker", "--wait=false")
        c.kubectl("delete", "fleetjob", "starved", "--wait=true", timeout=120)


if __name__ == "__main__":
    unittest.main()
