"""fleetctl end to end: the real binary against the fake control plane (tests/controlplane), with the
real fleet-operator running the jobs it submits.

  TestFleetctl:        submit (flags, a manifest, --wait, --dry-run), list, status, logs (-f too),
                       stop/resume, delete, -o json|yaml - against a cluster with the CRD and an
                       operator.
  TestFleetctlProgress: the training progress the operator writes into status.progress (written here
                       by the test, no operator) in status, top (--once, plain snapshots, a terminal)
                       and submit --wait --until=done.
  TestFleetctlErrors:  one clear line and a non-zero exit for: no cluster configured, an unreachable
                       cluster, no CRD installed, a job that does not exist, a refused object, a
                       usage error; --wait that times out.

Run (ctest does):  FLEETCTL=... FLEET_OPERATOR_BINARY=... /usr/bin/python3 -m unittest -v test_fleetctl
"""

import datetime
import json
import os
import pty
import re
import select
import shlex
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "chart"))
import fleet_cluster  # noqa: E402
from fleet_cluster import FLEET_GROUP, FLEET_VERSION, ROOT, Cluster, wait_for  # noqa: E402

FLEETCTL = os.environ.get("FLEETCTL", os.path.join(ROOT, "build", "cli", "fleetctl"))
OPERATOR = os.environ.get("FLEET_OPERATOR_BINARY", os.path.join(ROOT, "build", "operator", "fleet-operator"))
CRD = os.path.join(ROOT, "crds", "fleetjob.yaml")
PS_EXAMPLE = os.path.join(ROOT, "examples", "k8s", "ps.yaml")
TOOLS = "fleetjob/tools:0.1.0"
PS_COMMAND = ["--", "python3", "-u", "/opt/fleetjob/examples/ps/train.py"]


class Run:
    def __init__(self, proc):
        self.code, self.out, self.err = proc.returncode, proc.stdout, proc.stderr

    def __repr__(self):
        return "exit %d\nstdout:\n%s\nstderr:\n%s" % (self.code, self.out, self.err)


class FleetctlTest(unittest.TestCase):
    """A fake control plane per test class: with the FleetJob CRD when `crd`, with no operator."""
    cluster = None
    crd = True

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        cls.home = cls.cluster.dir
        if cls.crd:
            cls.cluster.install_crd(CRD)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def fleetctl(self, *args, kubeconfig=None, stdin=None, timeout=60):
        kc = kubeconfig or self.cluster.kubeconfig
        proc = subprocess.run([FLEETCTL, "--kubeconfig", kc] + list(args), input=stdin, capture_output=True,
                              text=True, timeout=timeout, env=dict(os.environ, KUBECONFIG="", HOME=self.home))
        return Run(proc)

    def ok(self, *args, **kwargs):
        run = self.fleetctl(*args, **kwargs)
        self.assertEqual(run.code, 0, "fleetctl %s: %r\n%s" % (" ".join(args), run,
                                                              self.cluster.logs() if self.cluster else ""))
        return run

    def fails(self, expected_message, *args, code=1, **kwargs):
        """fleetctl exits `code` with exactly one line on stderr containing `expected_message`."""
        run = self.fleetctl(*args, **kwargs)
        self.assertEqual(run.code, code, "fleetctl %s: %r" % (" ".join(args), run))
        lines = run.err.splitlines()
        self.assertEqual(len(lines), 1, "not one line: %r" % run.err)
        self.assertTrue(lines[0].startswith("fleetctl: "), lines[0])
        self.assertIn(expected_message, lines[0])
        return run


class TestFleetctl(FleetctlTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.operator = cls.cluster.start("fleet-operator", [
            OPERATOR, "--kubeconfig=" + cls.cluster.kubeconfig, "--metrics-bind-address=0",
            "--health-probe-bind-address=127.0.0.1:0", "--log-level=debug"])

    def wait_phase(self, name, phase, ns="default"):
        return self.cluster.wait_for_phase(ns, name, phase)

    def test_the_tour_of_fleetctl_md(self):
        with open(os.path.join(ROOT, "docs", "fleetctl.md")) as f:
            tour = re.search(r"## A tour.*?```sh\n(.*?)```", f.read(), re.S).group(1)
        commands = [shlex.split(c) for c in tour.replace("\\\n", " ").splitlines() if c.strip()]
        self.assertEqual([c[1] for c in commands], ["submit", "list", "status", "logs", "stop", "resume", "delete"])
        for argv in commands:
            self.assertEqual(argv[0], "fleetctl")
            run = self.ok(*argv[1:])
            if argv[1] == "submit":
                self.assertIn("ps-demo: Running  server 2/2 ready  worker 2/2 ready", run.out)
            if argv[1] == "stop":
                self.wait_phase("ps-demo", "Suspended")
        self.assertIsNone(self.cluster.job("default", "ps-demo"))

    # ---- submit ------------------------------------------------------------------------------------
    def test_submit_from_flags_waits_until_running(self):
        run = self.ok("submit", "--name=flags-ps", "--server_num=2", "--worker_num=3", "--image=" + TOOLS,
                      "--cpu=1", "--memory=1Gi", "--env", "EPOCHS=2", "--restart_policy=OnFailure", "--wait",
                      *PS_COMMAND)
        lines = run.out.splitlines()
        self.assertEqual(lines[0], "fleetjob/flags-ps created")
        self.assertTrue(lines[-1].startswith("flags-ps: Running  server 2/2 ready  worker 3/3 ready"), run.out)
        job = self.cluster.job("default", "flags-ps")
        self.assertEqual(job["status"]["phase"], "Running")
        spec = job["spec"]
        self.assertEqual((spec["mode"], spec["server"]["replicas"], spec["worker"]["replicas"]), ("ps", 2, 3))
        self.assertEqual(spec["worker"]["restartPolicy"], "OnFailure")
        (c,) = spec["worker"]["template"]["spec"]["containers"]
        self.assertEqual(c["command"], PS_COMMAND[1:])
        self.assertEqual(c["env"], [{"name": "EPOCHS", "value": "2"}])
        self.assertEqual(c["resources"]["limits"], {"cpu": "1", "memory": "1Gi"})
        self.assertEqual(len(self.cluster.pods("default", "flags-ps")), 5)

    def test_submit_generates_a_name_from_the_script(self):
        run = self.ok("submit", "--worker_num=2", "--image=" + TOOLS, "--", "python3", "/opt/x/train_mnist.py")
        (line,) = run.out.splitlines()
        self.assertRegex(line, r"^fleetjob/train-mnist-[a-z0-9]{5} created$")
        name = line.split("/")[1].split()[0]
        self.assertEqual(self.cluster.job("default", name)["spec"]["mode"], "collective")

    def test_submit_a_manifest_with_wait_and_json_output(self):
        self.cluster.create_namespace("team-b")
        run = self.ok("-n", "team-b", "submit", "-f", PS_EXAMPLE, "--wait", "-o", "json")
        job = json.loads(run.out)   # stdout: the job as it is once running; progress on stderr
        self.assertEqual((job["metadata"]["name"], job["metadata"]["namespace"]), ("ps-example", "team-b"))
        self.assertEqual(job["status"]["phase"], "Running")
        self.assertIn("ps-example: Running", run.err)
        with open(PS_EXAMPLE) as f:
            self.assertEqual(job["spec"], yaml.safe_load(f)["spec"])

    def test_submit_a_manifest_from_stdin_and_yaml_dry_run(self):
        with open(PS_EXAMPLE) as f:
            manifest = f.read()
        run = self.ok("submit", "-f", "-", "--dry-run", stdin=manifest.replace("ps-example", "dry"))
        job = yaml.safe_load(run.out)
        self.assertEqual(job["metadata"], {"name": "dry", "namespace": "default"})
        self.assertIsNone(self.cluster.job("default", "dry"), "--dry-run created the job")
        run = self.ok("submit", "--name=dry2", "--worker_num=2", "--gpus=4", "--image=paddle", "--dry-run",
                      "-o", "json", "--", "python", "-u", "train.py", "--lr=0.1")
        spec = json.loads(run.out)["spec"]
        self.assertEqual(spec["processesPerPod"], 4)
        self.assertEqual(spec["worker"]["template"]["spec"]["containers"][0]["command"],
                         ["fleetrun", "train.py", "--lr=0.1"])

    def test_submit_says_where_a_fleetctl_flag_after_the_dashes_went(self):
        run = self.ok("submit", "--name=dry3", "--image=paddle", "--dry-run", "--", "python3", "t.py", "--wait")
        self.assertEqual(yaml.safe_load(run.out)["spec"]["worker"]["template"]["spec"]["containers"][0]["command"],
                         ["python3", "t.py", "--wait"])
        self.assertEqual(run.err, 'fleetctl: note: --wait is after "--": it goes to the training command, not to '
                                  'fleetctl (fleetctl\'s flags go before "--")\n')

    def test_wait_reports_a_job_the_operator_fails(self):
        with open(PS_EXAMPLE) as f:
            job = yaml.safe_load(f)
        job["metadata"]["name"] = "bad-port"
        job["spec"]["port"] = 9102   # the sidecar's metrics port: the operator refuses the job
        self.fails('fleetjob "bad-port" failed: spec.sidecar.metricsPort', "submit", "-f", "-", "--wait",
                   stdin=json.dumps(job))
        self.assertEqual(self.cluster.job("default", "bad-port")["status"]["phase"], "Failed")

    # ---- list, status --------------------------------------------------------------------------------
    def submit_running(self, name, workers=2, ns="default"):
        self.ok("-n", ns, "submit", "--name=" + name, "--server_num=1", "--worker_num=%d" % workers,
                "--image=" + TOOLS, "--wait", *PS_COMMAND)
        return self.cluster.job(ns, name)

    def test_list(self):
        self.submit_running("listed")
        self.cluster.create_namespace("team-l")
        self.submit_running("elsewhere", ns="team-l")
        out = self.ok("list").out.splitlines()
        self.assertEqual(out[0].split(), ["NAME", "MODE", "PHASE", "SERVERS", "WORKERS", "HETER", "RESTARTS", "AGE"])
        row = [l for l in out if l.startswith("listed ")][0].split()
        self.assertEqual(row[:7], ["listed", "ps", "Running", "1/1", "2/2", "-", "0"])
        self.assertFalse([l for l in out if l.startswith("elsewhere")])
        out = self.ok("list", "-A").out.splitlines()
        self.assertEqual(out[0].split()[0], "NAMESPACE")
        self.assertTrue([l for l in out if l.split()[:2] == ["team-l", "elsewhere"]])
        listed = json.loads(self.ok("list", "-o", "json").out)
        self.assertEqual(listed["kind"], "FleetJobList")
        self.assertIn("listed", [j["metadata"]["name"] for j in listed["items"]])
        listed = yaml.safe_load(self.ok("-n", "team-l", "list", "-o", "yaml").out)
        self.assertEqual([j["metadata"]["name"] for j in listed["items"]], ["elsewhere"])
        self.cluster.create_namespace("empty")
        run = self.ok("-n", "empty", "list")
        self.assertEqual((run.out, run.err), ("", "No FleetJobs found in namespace empty.\n"))

    def test_status_shows_phase_roles_conditions_and_events(self):
        self.submit_running("stat", workers=3)
        text = self.ok("status", "stat").out
        self.assertRegex(text, r"Phase:\s+Running")
        self.assertRegex(text, r"Mode:\s+ps")
        rows = {l.split()[0]: l.split()[1:] for l in text.splitlines() if l.startswith(("server ", "worker "))}
        self.assertEqual(rows["server"][:3], ["1", "1", "1"])
        self.assertEqual(rows["worker"][:3], ["3", "3", "3"])
        self.assertIn("Conditions:", text)
        self.assertIn("Events:", text)
        doc = yaml.safe_load(self.ok("status", "stat", "-o", "yaml").out)
        self.assertEqual((doc["name"], doc["phase"], doc["mode"]), ("stat", "Running", "ps"))
        self.assertEqual([r["role"] for r in doc["roles"]], ["server", "worker"])
        self.assertEqual(doc["roles"][1]["ready"], 3)
        self.assertIn("Running", [c["type"] for c in doc["conditions"]])
        self.assertTrue(doc["events"], "the operator's events on the job")
        for e in doc["events"]:
            self.assertIn(e["type"], ("Normal", "Warning"))
            self.assertIn(e["reason"], text)
        self.assertEqual(doc["podsNotRunning"], [])
        self.assertEqual(len(json.loads(self.ok("status", "stat", "-o", "json", "--events=1").out)["events"]), 1)

    def test_status_says_why_pods_are_not_running(self):
        self.cluster.control("POST", "config", {"kubelet": "manual"})
        try:
            self.ok("submit", "--name=stuck", "--worker_num=2", "--image=" + TOOLS, "--", "python3", "x.py")
            wait_for("stuck's pods", lambda: len(self.cluster.pods("default", "stuck")) == 2)
            self.cluster.pod_action("default", "stuck-worker-0", {"action": "unschedulable",
                                                                  "message": "0/4 nodes have enough nvidia.com/gpu"})
            doc = json.loads(self.ok("status", "stuck", "-o", "json").out)
            why = {p["pod"]: (p["phase"], p["why"]) for p in doc["podsNotRunning"]}
            self.assertEqual(why["stuck-worker-0"][0], "Pending")
            self.assertIn("0/4 nodes have enough nvidia.com/gpu", why["stuck-worker-0"][1])
            self.assertIn("stuck-worker-1", why)
            self.assertIn("Not running:", self.ok("status", "stuck").out)
        finally:
            self.cluster.control("POST", "config", {"kubelet": "auto"})

    # ---- logs -----------------------------------------------------------------------------------------
    def test_logs_of_a_role_and_rank(self):
        self.submit_running("logged", workers=2)
        c = self.cluster
        c.append_log("default", "logged-worker-0", "step 1\nstep 2\nstep 3\n", container="paddle")
        c.append_log("default", "logged-server-0", "serving\n", container="paddle")
        c.append_log("default", "logged-worker-0", "gate open\n", container="fleet-sidecar")
        self.assertEqual(self.ok("logs", "logged").out, "step 1\nstep 2\nstep 3\n")
        self.assertEqual(self.ok("logs", "logged", "--tail=1").out, "step 3\n")
        self.assertEqual(self.ok("logs", "logged", "--role=server", "--rank", "0").out, "serving\n")
        self.assertEqual(self.ok("logs", "logged", "-c", "fleet-sidecar").out, "gate open\n")
        doc = json.loads(self.ok("logs", "logged", "-o", "json").out)
        self.assertEqual(doc, {"pod": "logged-worker-0", "container": "paddle", "log": "step 1\nstep 2\nstep 3\n"})
        self.fails('has no role "heter" (its roles: server, worker)', "logs", "logged", "--role=heter")
        self.fails("pod logged-worker-7 does not exist", "logs", "logged", "--rank=7")

    def follow_logs(self, *args):
        """`fleetctl logs ARGS -f` in the background: the lines it printed so far, and a function that
        waits for it to exit 0."""
        proc = subprocess.Popen([FLEETCTL, "--kubeconfig", self.cluster.kubeconfig, "logs", *args, "-f"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        out = []
        reader = threading.Thread(target=lambda: out.extend(iter(proc.stdout.readline, "")), daemon=True)
        reader.start()

        def finish():
            self.assertEqual(proc.wait(20), 0, proc.stderr.read())
            reader.join(5)
            proc.stdout.close()
            proc.stderr.close()
        return out, finish

    def test_logs_follow_until_the_pod_ends(self):
        self.submit_running("followed", workers=1)
        c = self.cluster
        c.append_log("default", "followed-worker-0", "epoch 0\nepoch 1\n", container="paddle")
        out, finish = self.follow_logs("followed", "--tail=1")
        wait_for("the last line so far", lambda: out == ["epoch 1\n"])
        c.append_log("default", "followed-worker-0", "epoch 2\n", container="paddle")
        wait_for("the new line", lambda: out == ["epoch 1\n", "epoch 2\n"])
        c.append_log("default", "followed-worker-0", "done\n", container="paddle")
        c.pod_action("default", "followed-worker-0", {"action": "succeed"})
        finish()
        self.assertEqual(out, ["epoch 1\n", "epoch 2\n", "done\n"])

    def test_logs_follow_streams_the_log_once(self):
        # One follow=true request for the container's run, not a re-read of the whole log per poll.
        self.submit_running("streamed", workers=1)
        c = self.cluster
        pod = "streamed-worker-0"
        c.append_log("default", pod, "line 1\n", container="paddle")
        c.clear_requests()
        out, finish = self.follow_logs("streamed")
        wait_for("the first line", lambda: out == ["line 1\n"])
        for i in range(2, 6):
            c.append_log("default", pod, "line %d\n" % i, container="paddle")
            wait_for("line %d" % i, lambda: len(out) == i)
        c.pod_action("default", pod, {"action": "succeed"})
        finish()
        self.assertEqual(out, ["line %d\n" % i for i in range(1, 6)])
        logs = [r for r in c.requests() if r["path"].endswith("/pods/%s/log" % pod)]
        self.assertEqual([r["query"] for r in logs], ["container=paddle&follow=true"])

    def test_logs_follow_as_json_gives_whole_lines(self):
        # Each document holds whole lines, whatever the chunks the stream came in (a chunk may end
        # inside a UTF-8 character).
        self.submit_running("jsonlog", workers=1)
        c = self.cluster
        pod = "jsonlog-worker-0"
        out, finish = self.follow_logs("jsonlog", "-o", "json")
        c.append_log("default", pod, "épopée 1\n", container="paddle")
        c.append_log("default", pod, "débit: 3 pas/s — ", container="paddle")
        c.append_log("default", pod, "fin\n", container="paddle")
        wait_for("both lines", lambda: "fin" in "".join(out))
        c.pod_action("default", pod, {"action": "succeed"})
        finish()
        text, docs, at = "".join(out), [], 0
        decoder = json.JSONDecoder()
        while text[at:].strip():
            doc, end = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
            docs.append(doc)
            at = end
        self.assertTrue(all(d["pod"] == pod and d["log"].endswith("\n") for d in docs), docs)
        self.assertEqual("".join(d["log"] for d in docs), "épopée 1\ndébit: 3 pas/s — fin\n")

    # ---- stop, resume, delete -----------------------------------------------------------------------
    def test_stop_and_resume(self):
        job = self.submit_running("pausable")
        run = job["status"]["run"]
        self.assertEqual(self.ok("stop", "pausable").out, "fleetjob/pausable suspended\n")
        self.wait_phase("pausable", "Suspended")
        wait_for("pausable's pods to go", lambda: not [
            p for p in self.cluster.pods("default", "pausable") if not p["metadata"].get("deletionTimestamp")])
        patched = json.loads(self.ok("resume", "pausable", "-o", "json").out)
        self.assertFalse(patched["spec"]["runPolicy"]["suspend"])
        job = self.wait_phase("pausable", "Running")
        self.assertGreater(job["status"]["run"], run)

    def test_delete(self):
        self.submit_running("doomed")
        self.submit_running("doomed2")
        self.assertEqual(self.ok("delete", "doomed").out, "fleetjob/doomed deleted\n")
        self.assertIsNone(self.cluster.job("default", "doomed"))
        doc = yaml.safe_load(self.ok("delete", "doomed2", "-o", "yaml").out)
        self.assertEqual([j["metadata"]["name"] for j in doc["items"]], ["doomed2"])
        self.fails('fleetjob "doomed" not found in namespace "default"', "delete", "doomed")

    def test_job_not_found(self):
        for args in (["status", "nope"], ["logs", "nope"], ["stop", "nope"], ["resume", "nope"], ["delete", "nope"]):
            with self.subTest(args=args):
                self.fails('fleetjob "nope" not found in namespace "default"', *args)

    def test_refused_objects_and_usage_errors(self):
        with open(PS_EXAMPLE) as f:
            manifest = f.read().replace("name: ps-example", "name: Bad_Name")
        self.fails("the API server refused the FleetJob", "submit", "-f", "-", stdin=manifest)
        self.ok("submit", "--name=twice", "--image=" + TOOLS, "--", "python3", "x.py")
        self.fails('fleetjob "twice" already exists in namespace "default"', "submit", "--name=twice",
                   "--image=" + TOOLS, "--", "python3", "x.py")
        self.fails("submit needs --image", "submit", "--", "python3", "x.py", code=2)
        self.fails("unknown flag --sever_num for submit", "submit", "--sever_num=2", code=2)
        self.fails("--worker_num: expected an integer from 1 to 10000, got '0'", "submit", "--worker_num=0", code=2)
        self.fails("--output: expected json or yaml, got 'xml'", "list", "-o", "xml", code=2)
        self.fails("status needs the FleetJob's name", "status", code=2)
        self.fails("--gpus > 1 runs one process per GPU through fleetrun", "submit", "--image=x", "--gpus=2",
                   "--", "./train.sh", code=2)


def rfc3339(seconds_ago=0):
    t = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=seconds_ago)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def progress(job, step=1200, seconds_ago=1):
    """status.progress as the operator writes it: 4 workers, worker 3 stalled behind the median."""
    def rank(r, s, idle, stalled=False):
        return {"role": "worker", "rank": r, "pod": "%s-worker-%d" % (job, r), "step": s, "stepsPerSecond": 3.1,
                "loss": 0.42, "lag": step - s, "idleSeconds": idle, "stalled": stalled}
    return {"updateTime": rfc3339(seconds_ago), "step": step, "totalSteps": 5000, "percent": step * 100 / 5000,
            "etaSeconds": 1260, "stepsPerSecond": 3.1, "samplesPerSecond": 812.5, "loss": 0.42,
            "ranks": 4, "reportingRanks": 4, "stalledRanks": 1,
            "roles": {"worker": {"ranks": 4, "reportingRanks": 4, "minStep": step - 10, "medianStep": step,
                                 "maxStep": step + 10, "stepsPerSecond": 3.1, "loss": 0.42}},
            "slowest": {"role": "worker", "rank": 3, "pod": job + "-worker-3", "step": step - 10, "lag": 10},
            "rankDetails": [rank(0, step, 1), rank(1, step + 10, 0), rank(2, step - 10, 1),
                            rank(3, step - 10, 60.0, stalled=True)]}


class TestFleetctlProgress(FleetctlTest):
    """The CRD and no operator: the test writes the jobs' status as the operator would."""

    def patch_status(self, name, status):
        """A merge patch of the job's status subresource, as the operator writes it."""
        path = "/apis/%s/%s/namespaces/default/fleetjobs/%s/status" % (FLEET_GROUP, FLEET_VERSION, name)
        req = urllib.request.Request(self.cluster.srv.url + path, method="PATCH",
                                     data=json.dumps({"status": status}).encode(),
                                     headers={"Content-Type": "application/merge-patch+json",
                                              "Authorization": "Bearer unused"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def running(self, name, **kwargs):
        return {"phase": "Running", "replicaStatuses": {"worker": {"replicas": 4, "active": 4, "ready": 4}},
                "progress": progress(name, **kwargs)}

    def submit(self, name):
        self.ok("submit", "--name=" + name, "--worker_num=4", "--image=" + TOOLS, *PS_COMMAND)

    def background(self, *args, stdout=subprocess.PIPE):
        proc = subprocess.Popen([FLEETCTL, "--kubeconfig", self.cluster.kubeconfig] + list(args),
                                stdout=stdout, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        return proc

    def test_status_and_top_once_show_the_progress(self):
        self.submit("prog")
        self.assertIn("Progress:   no progress reported yet\n", self.ok("status", "prog").out)
        self.patch_status("prog", self.running("prog"))
        text = self.ok("status", "prog").out
        self.assertIn("Progress:   [####................] 24%  step 1200/5000  3.1 step/s  ETA 21m  loss 0.42\n", text)
        self.assertIn("Ranks:      4/4 reporting, 1 stalled, 812 samples/s\n", text)
        self.assertIn("Slowest:    worker-3 (prog-worker-3) at step 1190, 10 steps behind the median\n", text)
        doc = json.loads(self.ok("status", "prog", "-o", "json").out)
        self.assertEqual(doc["progress"]["step"], 1200)

        top = self.ok("top", "prog", "--once").out.splitlines()
        self.assertEqual(top[0], "prog  Running  [####................] 24%  step 1200/5000  3.1 step/s  ETA 21m  "
                                 "loss 0.42  4/4 reporting, 1 stalled")
        self.assertEqual(top[2].split(), ["ROLE", "RANK", "POD", "STEP", "SPEED", "LOSS", "LAG", "IDLE"])
        rows = [line.split() for line in top[3:]]
        self.assertEqual([r[2] for r in rows], ["prog-worker-3", "prog-worker-2", "prog-worker-0", "prog-worker-1"])
        self.assertEqual(rows[0][3:], ["1190", "3.1", "0.42", "-10", "60s", "stalled"])
        self.assertEqual(rows[3][6], "+10")
        doc = yaml.safe_load(self.ok("top", "prog", "--once", "-o", "yaml").out)
        self.assertEqual((doc["phase"], doc["progress"]["slowest"]["rank"]), ("Running", 3))

        # The operator stopped writing it: status and top say how old it is.
        self.patch_status("prog", {"progress": {"updateTime": rfc3339(600)}})
        self.assertIn("(updated 10m ago)", self.ok("top", "prog", "--once").out.splitlines()[0])
        self.assertRegex(self.ok("status", "prog").out, r"Updated:\s+\S+ \(10m ago, stale\)")

    def test_top_prints_a_table_per_change_until_the_job_ends(self):
        self.submit("snap")
        self.patch_status("snap", self.running("snap"))
        top = self.background("top", "snap", "--interval=1s")
        out = []
        reader = threading.Thread(target=lambda: out.extend(iter(top.stdout.readline, "")), daemon=True)
        reader.start()
        wait_for("the first table", lambda: any("snap-worker-3" in line for line in out))
        time.sleep(1.5)   # a read or more of the same progress: no second table
        self.assertEqual(sum(line.startswith("snap  ") for line in out), 1, out)
        self.patch_status("snap", {"progress": progress("snap", step=1300)})
        wait_for("the second table", lambda: any("step 1300/5000" in line for line in out))
        self.patch_status("snap", {"phase": "Succeeded"})
        self.assertEqual(top.wait(20), 0, top.stderr.read())
        reader.join(5)
        top.stdout.close()
        top.stderr.close()
        headers = [line for line in out if line.startswith("snap  ")]
        self.assertEqual([h.split()[1] for h in headers], ["Running", "Running", "Succeeded"], out)
        self.assertNotIn("\x1b", "".join(out))

    def test_top_redraws_in_place_on_a_terminal(self):
        self.submit("tty")
        self.patch_status("tty", self.running("tty"))
        primary, secondary = pty.openpty()
        top = self.background("top", "tty", "--interval=1s", stdout=secondary)
        os.close(secondary)
        screen = b""

        def read():
            nonlocal screen
            while select.select([primary], [], [], 0)[0]:
                try:
                    screen += os.read(primary, 65536)
                except OSError:   # the terminal closed: top exited
                    break
            return screen
        wait_for("two redraws", lambda: read().count(b"\x1b[H\x1b[2J") >= 2)
        self.assertIn(b"tty-worker-3", screen)
        self.patch_status("tty", {"phase": "Failed"})
        self.assertEqual(top.wait(20), 0, top.stderr.read())
        read()
        os.close(primary)
        self.assertIn(b"tty  Failed", screen.split(b"\x1b[H\x1b[2J")[-1])

    def test_submit_wait_until_done_shows_the_progress(self):
        wait = self.background("submit", "--name=done", "--worker_num=4", "--image=" + TOOLS, "--wait",
                               "--until=done", *PS_COMMAND)
        wait_for("the job", lambda: self.cluster.job("default", "done"))
        self.patch_status("done", self.running("done"))
        self.patch_status("done", {"phase": "Succeeded", "progress": progress("done", step=5000)})
        self.assertEqual(wait.wait(20), 0, wait.stderr.read())
        lines = wait.stdout.read().splitlines()
        wait.stdout.close()
        wait.stderr.close()
        self.assertEqual(lines[0], "fleetjob/done created")
        self.assertIn("done: Running  worker 4/4 ready  [####................] 24%  step 1200/5000  3.1 step/s  "
                      "ETA 21m  loss 0.42", lines)
        self.assertTrue(lines[-1].startswith("done: Succeeded  worker 4/4 ready  [####################] 100%"), lines)


class TestFleetctlErrors(FleetctlTest):
    """Clusters that are not there, or not ready for FleetJobs."""
    crd = False

    def test_no_cluster_configured(self):
        missing = os.path.join(self.cluster.dir, "no-such-kubeconfig")
        self.fails("no cluster configured: kubeconfig %s" % missing, "list", kubeconfig=missing)
        # Without --kubeconfig, KUBECONFIG or ~/.kube/config either (HOME is a scratch directory).
        run = subprocess.run([FLEETCTL, "list"], capture_output=True, text=True, timeout=30,
                             env={"HOME": self.cluster.dir, "PATH": os.environ.get("PATH", "")})
        self.assertEqual(run.returncode, 1)
        self.assertRegex(run.stderr, r"^fleetctl: no cluster configured: .*\n$")

    def test_unreachable_cluster(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]   # closed again: nothing listens there
        kc = os.path.join(self.cluster.dir, "unreachable")
        with open(kc, "w") as f:
            f.write(fleet_cluster.KUBECONFIG.format(server="http://127.0.0.1:%d" % port, namespace="default"))
        self.fails("cannot reach the cluster at http://127.0.0.1:%d" % port, "list", kubeconfig=kc)
        self.fails("cannot reach the cluster at http://127.0.0.1:%d" % port, "status", "x", kubeconfig=kc)

    def test_no_crd_installed(self):
        for args in (["list"], ["status", "x"], ["logs", "x"], ["stop", "x"], ["delete", "x"],
                     ["submit", "--image=x", "--", "python3", "t.py"]):
            with self.subTest(args=args):
                self.fails("the FleetJob API (fleetjobs.fleet.paddlepaddle.org/v1alpha1) is not installed", *args)

    def test_wait_times_out_without_an_operator(self):
        self.addCleanup(self.cluster.delete_crd, self.cluster.install_crd(CRD))
        run = self.fails('timed out after 1s waiting for fleetjob "idle" (phase <none>)', "submit", "--name=idle",
                         "--image=x", "--wait", "--timeout=1s", "--", "python3", "t.py")
        self.assertEqual(run.out, "fleetjob/idle created\nidle: <none>  worker 0/1 ready\n")


class EndlessListServer:
    """An API server stand-in that answers every list with one FleetJob and a new continue token."""

    def __init__(self):
        import http.server
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests += 1
                body = json.dumps({"apiVersion": "%s/%s" % (FLEET_GROUP, FLEET_VERSION), "kind": "FleetJobList",
                                   "metadata": {"resourceVersion": "1", "continue": "token-%d" % outer.requests},
                                   "items": [{"metadata": {"name": "job-%d" % outer.requests, "namespace": "default"},
                                              "spec": {"worker": {"replicas": 1}}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class TestFleetctlHostileServer(FleetctlTest):
    """A server that never stops paging: fleetctl stops with a clear error, not out of memory."""
    crd = False

    def test_an_endless_continue_token_is_an_error(self):
        server = EndlessListServer()
        self.addCleanup(server.close)
        kc = os.path.join(self.cluster.dir, "endless")
        with open(kc, "w") as f:
            f.write(fleet_cluster.KUBECONFIG.format(server=server.url, namespace="default"))
        self.fails("listing fleetjobs stopped at 100 items in 100 pages (at most 20000 items, 100 pages): "
                   "the server keeps sending more", "list", kubeconfig=kc)
        self.assertLessEqual(server.requests, 100)


if __name__ == "__main__":
    unittest.main()
