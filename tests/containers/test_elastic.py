"""Elastic FleetJobs (issue 18) in real containers, with a real etcd.

The etcd is the chart's own (`etcd.enabled`): its StatefulSet's pod template, rendered by
`helm template`, runs as a pod from localhost/fleetjob/etcd (scripts/images.sh). The jobs reach it
at its pod address: this cluster has no DNS and no Services, and the chart's etcd listens on its
pod's address, so `spec.elastic.etcdEndpoint` is `<its podIP>:2379` (on a real cluster the Service
name). Each worker pod runs fleetrun in PaddleCloud style with the operator's elastic env, and
fleetrun runs examples/elastic/train.py: fleet_runtime's Gloo all-reduce over the pods' addresses,
restarted by fleetrun with new ranks on every change of members, resuming from its newest
checkpoint. The checkpoints go to a directory all the job's pods mount: a hostPath directory of
this machine stands in for the ReadWriteMany claim of examples/k8s/elastic.yaml (every node of this
cluster is this machine).

One cluster, operator and etcd for all the tests (setUpClass). Two nodes: the starvation test
places workers one per node (required pod anti-affinity) and takes a node away from them.

Run (ctest does):  FLEET_BUILD_DIR=build /usr/bin/python3 -m unittest -v test_elastic
The recovery benchmark: bench/elastic_recovery_containers.py (docs/benchmarks.md).
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import yaml

from cluster import BASE_IMAGE, ROOT, VERSION, require, wait_for
from test_fleetjob import HELM, OPERATOR_NS, OperatorInContainers, fleetjob, trainer

ETCD_IMAGE = "fleetjob/etcd:%s" % VERSION
ETCD_POD = "fleetjob-etcd-0"
GENERATION = re.compile(r"elastic: starting generation (\d+) with \d+ nodes \(([^)]*)\)")
RESUMED = re.compile(r"rank \d+: resumed from step (\d+)")
TRAIN = "/opt/fleetjob/examples/elastic/train.py"
CHECKPOINT_EVERY = 10
# The steps are paced (FLEET_EXAMPLE_STEP_SECONDS) so that a job lasts at least steps x pace
# however fast the machine: a change of members lands mid-run, and the training after it outlasts
# a replacement pod's start (a few seconds here; 10 s on a loaded 2-core machine).
STEP_SECONDS = float(os.environ.get("FLEET_ELASTIC_TEST_STEP_SECONDS", "0.05"))
TOOLS_UID = 65532   # the tools image's user and group


def elastic_job(name, replicas, etcd, steps, checkpoints=None, min_replicas=2, max_replicas=4,
                timeout_seconds=60, labels=None, restart_policy="ExitCode", **pod_spec):
    """A collective FleetJob of `replicas` workers, each running fleetrun on the elastic example,
    `steps` steps paced by STEP_SECONDS; with `checkpoints` (a directory of this machine) its pods
    checkpoint to and resume from it. Without `etcd` it is the same job, not elastic (the
    benchmark's whole-job restart, with restart_policy OnFailure: its pods run fleetrun, which
    runs the script once with the operator's per-process env)."""
    env = [{"name": "FLEET_EXAMPLE_STEPS", "value": str(steps)},
           {"name": "FLEET_EXAMPLE_LOG_EVERY", "value": str(steps)},
           {"name": "FLEET_EXAMPLE_STEP_SECONDS", "value": str(STEP_SECONDS)}]
    container = trainer(["fleetrun", "--grace_period=2", TRAIN], env=env)
    if checkpoints:
        env += [{"name": "FLEET_EXAMPLE_CHECKPOINT_DIR", "value": "/checkpoints"},
                {"name": "FLEET_EXAMPLE_CHECKPOINT_EVERY", "value": str(CHECKPOINT_EVERY)}]
        container["volumeMounts"] = [{"name": "checkpoints", "mountPath": "/checkpoints"}]
        pod_spec = dict(pod_spec, securityContext={"fsGroup": TOOLS_UID},
                        volumes=[{"name": "checkpoints", "hostPath": {"path": checkpoints, "type": "Directory"}}])
    template = {"spec": dict({"containers": [container]}, **pod_spec)}
    if labels:
        template["metadata"] = {"labels": labels}
    spec = {"runPolicy": {"backoffLimit": 3}}
    if etcd:
        spec["elastic"] = {"minReplicas": min_replicas, "maxReplicas": max_replicas, "etcdEndpoint": etcd,
                           "timeoutSeconds": timeout_seconds}
    return fleetjob(name, "collective", worker={"replicas": replicas, "restartPolicy": restart_policy,
                                                "template": template}, **spec)


def apply_etcd(cluster):
    """The chart's etcd (etcd.enabled), its StatefulSet's pod template run as one pod (the test
    control plane stores StatefulSets without a controller)."""
    rendered = subprocess.run([HELM, "template", "fleetjob", os.path.join(ROOT, "charts", "fleetjob"),
                               "--namespace", OPERATOR_NS, "--set", "etcd.enabled=true",
                               "--show-only", "templates/etcd.yaml"],
                              capture_output=True, text=True, check=True).stdout
    sts = next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "StatefulSet")
    template = sts["spec"]["template"]
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": dict(template["metadata"], name=ETCD_POD),
                   "spec": template["spec"]}, OPERATOR_NS)


def etcd_address(cluster):
    """The client address of the etcd apply_etcd started, once it is ready."""
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
        cls.checkpoint_root = tempfile.mkdtemp(prefix="fleetjob-checkpoints-")

    @classmethod
    def start_operator(cls):
        """The operator, and the chart's etcd starting meanwhile."""
        cls.cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NS}})
        apply_etcd(cls.cluster)
        super().start_operator()
        cls.etcd = etcd_address(cls.cluster)

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.checkpoint_root, ignore_errors=True)

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

    def checkpoint_dir(self, job):
        """A new directory for `job`'s checkpoints, writable by the pods' user. (A real kubelet
        applies fsGroup to a claim's volume, not to a hostPath one: the owner is set here.)"""
        path = os.path.join(self.checkpoint_root, job)
        os.mkdir(path)
        os.chown(path, TOOLS_UID, TOOLS_UID)
        return path

    def resumed_step(self, pod, hosts):
        """The step the trainer in `pod` resumed from in the first generation of `hosts` (or a later
        one), None before it logged it."""
        log = self.cluster.kubectl("logs", pod, "-c", "trainer", check=False)
        start = next((m.end() for m in GENERATION.finditer(log) if set(m.group(2).split(",")) == hosts), None)
        resumed = RESUMED.search(log, start) if start is not None else None
        return int(resumed.group(1)) if resumed else None

    def wait_succeeded(self, name):
        """The job once Succeeded; its workers' logs are printed when it failed."""
        job = self.wait_job(name)
        if job["status"]["phase"] != "Succeeded":
            for pod in self.workers(name):
                print("--- %s:\n%s" % (pod, self.cluster.kubectl("logs", pod, "-c", "trainer", check=False)[-3000:]))
        self.assertEqual(job["status"]["phase"], "Succeeded", json.dumps(job["status"], indent=1))
        return job

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
            # fleetrun says ABORT only when it gives up (a trainer failing as its peer leaves is not)
            self.assertNotIn("ABORT", self.cluster.kubectl("logs", n, "-c", "trainer"), n)

    # ---- the tests ----------------------------------------------------------------------
    def test_a_lost_worker_pod_is_replaced_alone_and_the_job_succeeds_in_its_run(self):
        """3 workers (2..4) checkpointing to a volume they share; worker 1 is deleted mid-run (as an
        eviction does: SIGTERM, then gone) after a checkpoint. The two others re-rendezvous without
        it and resume from the checkpoint, the operator creates it again in the same run, all three
        train together again, and the job succeeds with no whole-job restart."""
        c = self.cluster
        checkpoints = self.checkpoint_dir("lost")
        # 400 paced steps: 20 s at least, of which the replacement's start takes 2-10 s.
        c.apply(elastic_job("lost", 3, self.etcd, steps=400, checkpoints=checkpoints))
        names = ["lost-worker-0", "lost-worker-1", "lost-worker-2"]
        before = self.wait_generation("lost", names)
        status = self.wait_members("lost", names)
        run, rendezvous = status["run"], status["elastic"]["rendezvous"]
        wait_for("lost: a checkpoint in %s" % checkpoints,
                 lambda: glob.glob(os.path.join(checkpoints, "ckpt-*.json")), timeout=60)

        t0 = time.monotonic()
        c.kubectl("delete", "pod", "lost-worker-1", "--wait=false")
        survivors = ["lost-worker-0", "lost-worker-2"]
        pods = self.wait_generation("lost", survivors)
        t_survivors = time.monotonic() - t0
        hosts = {pods[n]["status"]["podIP"] for n in survivors}
        resumed = {n: wait_for("%s resumed after the loss" % n, lambda n=n: self.resumed_step(n, hosts), timeout=60)
                   for n in survivors}
        self.assertTrue(all(step > 0 for step in resumed.values()), resumed)
        pods = wait_for("lost-worker-1 replaced", lambda: (lambda ps: ps if "lost-worker-1" in ps and ps[
            "lost-worker-1"]["metadata"]["uid"] != before["lost-worker-1"]["metadata"]["uid"] else None)(
            self.workers("lost")), timeout=60)
        self.wait_generation("lost", names)
        print("\nlost: worker 1 deleted -> the survivors' fleetrun restarted as 2 in %.1f s (resumed from steps %s),"
              " all 3 again in %.1f s (seen by polling the logs)"
              % (t_survivors, sorted(resumed.values()), time.monotonic() - t0))
        status = self.wait_members("lost", names)
        self.assertEqual(status["phase"], "Running")
        self.assertGreaterEqual(status["elastic"]["rendezvous"], rendezvous + 2, "without it, then with it again")

        job = self.wait_succeeded("lost")
        self.assert_kept_their_run(job, before, survivors, run)
        self.assertNotEqual(pods["lost-worker-1"]["status"].get("podIP"), before["lost-worker-1"]["status"]["podIP"])
        changes = self.events("lost", "MembershipChanged")
        self.assertTrue(any(m.startswith("lost-worker-1 left: 2 worker(s) running") for m in changes), changes)
        c.kubectl("delete", "fleetjob", "lost", "--wait=true", timeout=120)

    def test_a_suspended_job_checkpoints_before_its_pods_stop_and_the_resumed_run_starts_there(self):
        """spec.checkpoint.beforeStop: suspending the job deletes its pods; the kubelet runs each
        trainer's preStop hook (GET /checkpoint on its sidecar) before SIGTERM, rank 0 saves a
        checkpoint at once (no periodic ones: CHECKPOINT_EVERY is out of reach) and answers with its
        step within the grace period; the operator records it in status.checkpoint with an event,
        and the resumed run's pods get FLEET_CHECKPOINT_STEP and resume from that very step."""
        c = self.cluster
        checkpoints = self.checkpoint_dir("asked")
        job = elastic_job("asked", 2, self.etcd, steps=100000, checkpoints=checkpoints)
        env = job["spec"]["worker"]["template"]["spec"]["containers"][0]["env"]
        next(e for e in env if e["name"] == "FLEET_EXAMPLE_CHECKPOINT_EVERY")["value"] = "1000000"
        next(e for e in env if e["name"] == "FLEET_EXAMPLE_LOG_EVERY")["value"] = "10"
        job["spec"]["checkpoint"] = {"beforeStop": True, "timeoutSeconds": 25}
        c.apply(job)
        names = ["asked-worker-0", "asked-worker-1"]
        pods = self.wait_generation("asked", names)
        self.assertEqual(pods["asked-worker-0"]["spec"]["terminationGracePeriodSeconds"], 35)   # 25 + 10
        def logged_step():
            steps = [int(m) for m in re.findall(r"step(\d+), train_loss", self.cluster.kubectl(
                "logs", "asked-worker-0", "-c", "trainer", check=False))]
            return max(steps, default=0)
        wait_for("asked: training past step 20 (its log)", lambda: logged_step() > 20, timeout=60)
        self.assertEqual(glob.glob(os.path.join(checkpoints, "ckpt-*.json")), [], "no periodic checkpoint")

        t0 = time.monotonic()
        c.kubectl("patch", "fleetjob", "asked", "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":true}}}')
        status = wait_for("asked: status.checkpoint", lambda: (lambda st: st if st.get("checkpoint") else None)(
            self.job("asked")["status"]), timeout=60)
        saved = status["checkpoint"]["step"]
        t_saved = time.monotonic() - t0
        # Each pod's hook asks; the ranks agree on a step each time (a later pod's request may make a
        # second one, which a rank stopped first may not see answered): the step recorded is one
        # rank 0 saved, and the run resumes from it or a newer one.
        saved_files = sorted(glob.glob(os.path.join(checkpoints, "ckpt-*.json")))
        self.assertIn(os.path.join(checkpoints, "ckpt-%08d.json" % saved), saved_files)
        newest = int(os.path.basename(saved_files[-1])[5:13])
        self.assertIn(status["checkpoint"]["pod"], names)
        wait_for("asked: suspended, its pods gone", lambda: self.job("asked")["status"].get("phase") == "Suspended"
                 and not self.workers("asked"), timeout=60)
        self.assertTrue(any("step %d" % saved in m for m in self.events("asked", "CheckpointSaved")),
                        self.events("asked", "CheckpointSaved"))

        c.kubectl("patch", "fleetjob", "asked", "--type=merge", "-p", '{"spec":{"runPolicy":{"suspend":false}}}')
        pods = self.wait_generation("asked", names)
        for n in names:
            env = {e["name"]: e.get("value") for e in pods[n]["spec"]["containers"][0]["env"]}
            self.assertEqual(env.get("FLEET_CHECKPOINT_STEP"), str(saved), n)
        hosts = {pods[n]["status"]["podIP"] for n in names}
        resumed = {n: wait_for("%s resumed" % n, lambda n=n: self.resumed_step(n, hosts), timeout=60) for n in names}
        self.assertEqual(set(resumed.values()), {newest}, resumed)
        print("\nasked: suspended -> checkpoint of step %d recorded in %.1f s; resumed there" % (saved, t_saved))
        c.kubectl("delete", "fleetjob", "asked", "--wait=true", timeout=120)

    # ---- pods that run Paddle 2.3+'s launcher's command line ---------------------------------
    # spec.launcher PaddleLaunch: the operator gives the pods what `python -m paddle.distributed.launch`
    # reads (a master on pod 0, PADDLE_NNODES, PADDLE_RANK, PADDLE_JOB_ID; elastic: an etcd master
    # and MIN:MAX) and no lists. The pods run fleetrun, which takes that launcher's env as Paddle's
    # does: pod 0's serves the master at its own address, ranks are the given ones.
    def launcher_log(self, pod, local_rank=0):
        """The trainer's output as the launcher wrote it (PADDLE_LOG_DIR), read in its container."""
        return self.cluster.podman("exec", self.cluster.container(pod, "trainer"), "cat",
                                   "/var/log/fleet/paddle/workerlog.%d" % local_rank, check=False).stdout or ""

    def test_paddle_launch_pods_rank_by_index_and_a_killed_trainer_restarts_the_job(self):
        c = self.cluster
        job = elastic_job("launched", 3, None, steps=300)
        job["spec"]["launcher"] = "PaddleLaunch"
        c.apply(job)
        names = ["launched-worker-%d" % i for i in range(3)]
        def ranks():
            found = {n: wait_for("%s: its trainer's rank" % n,
                                 lambda n=n: re.search(r"rank (\d+)/3", self.launcher_log(n)), timeout=120)
                     for n in names}
            return {n: int(m.group(1)) for n, m in found.items()}
        self.assertEqual(ranks(), {n: i for i, n in enumerate(names)})
        status = self.job("launched")["status"]
        self.assertEqual(status["launcher"], "worker=PaddleLaunch")
        run = status["run"]
        killed = time.monotonic()
        c.podman("kill", "--signal", "KILL", c.container("launched-worker-1", "trainer"))
        wait_for("launched: every pod of a new run running", lambda: (lambda ps: len(ps) == 3 and all(
            int(p["metadata"]["labels"].get("fleet.paddlepaddle.org/run", "0")) > run and
            p["status"].get("phase") == "Running" for p in ps.values()))(self.workers("launched")), timeout=240)
        print("recreate: kill -> every pod of the new run running in %.1f s" % (time.monotonic() - killed))
        self.assertEqual(ranks(), {n: i for i, n in enumerate(names)}, "the new run ranks pods by index too")
        done = self.wait_succeeded("launched")
        self.assertGreaterEqual(done["status"].get("restartCount", 0), 1)
        c.kubectl("delete", "fleetjob", "launched", "--wait=true", timeout=120)

    def test_a_killed_trainer_restarts_in_place_and_the_job_succeeds(self):
        """runPolicy.restartStrategy InPlace: a trainer SIGKILLed mid-run is restarted by the
        kubelet in its pod, the others follow (their sidecars' liveness route), every trainer waits
        at its gate until the operator lifts the barrier, and the job succeeds: the same pods (uids),
        one restart, done in place."""
        c = self.cluster
        # 600 paced steps: 30 s at least, the kill comes after the first.
        job = elastic_job("inplace", 3, None, steps=600, restart_policy="OnFailure")
        job["spec"]["runPolicy"]["restartStrategy"] = "InPlace"
        c.apply(job)
        names = ["inplace-worker-%d" % i for i in range(3)]
        for n in names:
            wait_for("%s: training" % n, lambda n=n: "step1," in c.kubectl("logs", n, "-c", "trainer", check=False),
                     timeout=120)
        before = self.workers("inplace")
        run = self.job("inplace")["status"]["run"]
        killed = time.monotonic()
        c.podman("kill", "--signal", "KILL", c.container(names[1], "trainer"))
        restarted = wait_for("inplace: its gates open again in place", lambda: (lambda st: st if st.get("run", 0) > run and
                             st.get("inPlaceRestart", {}).get("gatesOpen", True) and
                             st.get("inPlaceRestarts") else None)(self.job("inplace")["status"]), timeout=120)
        print("in place: kill -> the new run's gates open in %.1f s" % (time.monotonic() - killed))
        self.assertEqual(restarted.get("inPlaceRestarts"), 1, json.dumps(restarted, indent=1))
        done = self.wait_succeeded("inplace")
        events = [e for e in json.loads(c.kubectl("get", "events", "-o", "json"))["items"]
                  if e.get("involvedObject", {}).get("name") == "inplace"]
        self.assertEqual(done["status"].get("restartCount"), 1,
                         "\n".join("%s: %s" % (e.get("reason"), e.get("message")) for e in events))
        self.assertEqual(done["status"].get("inPlaceRestarts"), 1)
        after = self.workers("inplace")
        self.assertEqual({n: p["metadata"]["uid"] for n, p in after.items()},
                         {n: p["metadata"]["uid"] for n, p in before.items()}, "no pod was made anew")
        for n in names:
            trainer = next(s for s in after[n]["status"]["containerStatuses"] if s["name"] == "trainer")
            self.assertGreaterEqual(trainer.get("restartCount", 0), 1, n)
        c.kubectl("delete", "fleetjob", "inplace", "--wait=true", timeout=120)

    def test_paddle_launch_elastic_job_loses_a_pod_and_succeeds(self):
        c = self.cluster
        checkpoints = self.checkpoint_dir("lelastic")
        job = elastic_job("lelastic", 3, self.etcd, steps=400, checkpoints=checkpoints)
        job["spec"]["launcher"] = "PaddleLaunch"
        c.apply(job)
        names = ["lelastic-worker-%d" % i for i in range(3)]
        before = self.wait_generation("lelastic", names)
        env = json.loads(c.kubectl("get", "pod", names[1], "-o", "json"))["spec"]["containers"][0]["env"]
        given = {e["name"]: e.get("value") for e in env}
        self.assertEqual(given.get("PADDLE_NNODES"), "2:4")
        self.assertTrue(given.get("PADDLE_MASTER", "").startswith("etcd://"), given)
        self.assertNotIn("PADDLE_ELASTIC_SERVER", given)
        wait_for("lelastic: a checkpoint", lambda: glob.glob(os.path.join(checkpoints, "ckpt-*.json")), timeout=60)
        c.kubectl("delete", "pod", names[1], "--wait=false")
        wait_for("lelastic-worker-1 replaced", lambda: (lambda ps: names[1] in ps and ps[names[1]]["metadata"][
            "uid"] != before[names[1]]["metadata"]["uid"])(self.workers("lelastic")), timeout=60)
        job = self.wait_succeeded("lelastic")
        self.assertEqual(job["status"]["run"], self.job("lelastic")["status"]["run"])
        self.assert_kept_their_run(job, before, [names[0], names[2]], job["status"]["run"])
        c.kubectl("delete", "fleetjob", "lelastic", "--wait=true", timeout=120)

    def test_raising_replicas_adds_a_worker_without_a_new_run(self):
        """2 workers (2..4), then `kubectl patch` to 3: a third pod joins, all three train together,
        and the first two keep their pods and run."""
        c = self.cluster
        # 400 paced steps: 20 s at least, of which the new pod's start takes 2-10 s.
        c.apply(elastic_job("grow", 2, self.etcd, steps=400))
        before = self.wait_generation("grow", ["grow-worker-0", "grow-worker-1"])
        status = self.wait_members("grow", ["grow-worker-0", "grow-worker-1"])
        run, rendezvous = status["run"], status["elastic"]["rendezvous"]

        c.kubectl("patch", "fleetjob", "grow", "--type=merge", "-p", '{"spec":{"worker":{"replicas":3}}}')
        names = ["grow-worker-0", "grow-worker-1", "grow-worker-2"]
        self.wait_generation("grow", names)
        status = self.wait_members("grow", names)
        self.assertGreater(status["elastic"]["rendezvous"], rendezvous)

        job = self.wait_succeeded("grow")
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
        c.apply(elastic_job("starved", 2, self.etcd, steps=10 ** 6, max_replicas=3, timeout_seconds=timeout,
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
