"""A test cluster for the chart and fleetctl tests: the fake API server (tests/controlplane) in this
process, a kubeconfig for it, kubectl, and fleet-operator processes.

The test reads and changes the cluster's state through the fake's store and control API, never
through its Kubernetes API, so that the fake's request log holds only what the programs under test
asked (the RBAC check reads it). Waits poll with a deadline; nothing sleeps a fixed time.
"""

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "controlplane"))
sys.dont_write_bytecode = True
import fake_apiserver  # noqa: E402

KUBECTL = shutil.which("kubectl")
FLEET_GROUP, FLEET_VERSION = "fleet.paddlepaddle.org", "v1alpha1"

KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {{server: "{server}"}}
contexts:
- name: fake
  context: {{cluster: fake, user: tester, namespace: {namespace}}}
current-context: fake
users:
- name: tester
  user: {{token: unused}}
"""


def _die_with_parent():
    # PR_SET_PDEATHSIG: an operator never outlives the test that started it.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


class Timeout(AssertionError):
    pass


def wait_for(what, check, timeout=20.0, poll=0.02):
    """Polls check() until it returns something truthy (returned) or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = check()
        except Exception as e:  # noqa: BLE001 - reported if it never succeeds
            last = e
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise Timeout("timed out after %.0f s waiting for %s (last: %r)" % (timeout, what, last))
        time.sleep(poll)


class Process:
    """A program under test, its stdout and stderr in a file."""

    def __init__(self, name, argv, directory, env=None):
        self.name, self.argv = name, argv
        self.log_path = os.path.join(directory, name + ".log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent, env=env)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def serving_port(self, what):
        """The port of the "serving <what>" log line (text or JSON logs), once logged."""
        for line in self.log().splitlines():
            if "serving " + what not in line:
                continue
            m = re.search(r'"port"\s*:\s*"?(\d+)', line) or re.search(r"\bport=(\d+)", line)
            if m:
                return int(m.group(1))
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class Cluster:
    def __init__(self, namespace="default"):
        self.srv = fake_apiserver.FakeApiServer()
        self.srv.start()
        self.dir = tempfile.mkdtemp(prefix="fleet-cluster-")
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        with open(self.kubeconfig, "w") as f:
            f.write(KUBECONFIG.format(server=self.srv.url, namespace=namespace))
        self.processes = []

    def close(self):
        for p in self.processes:
            p.stop()
        self.srv.stop()
        shutil.rmtree(self.dir, True)

    def logs(self):
        """Every process's log, for failure messages."""
        return "\n".join("---- %s (%s)\n%s" % (p.name, " ".join(p.argv), p.log()) for p in self.processes)

    # ---- programs -------------------------------------------------------------------------------
    def kubectl(self, *args, stdin=None, check=True):
        out = subprocess.run([KUBECTL, "--kubeconfig", self.kubeconfig, "--cache-dir", os.path.join(self.dir, "cache")]
                             + list(args), input=stdin, capture_output=True, text=True, timeout=60)
        if check and out.returncode != 0:
            raise AssertionError("kubectl %s: exit %d\n%s%s" % (" ".join(args), out.returncode, out.stdout, out.stderr))
        return out

    def start(self, name, argv, env=None):
        p = Process(name, argv, self.dir, env)
        self.processes.append(p)
        return p

    # ---- state, read and written in process (not through the API) --------------------------------
    def _rt(self, group, version, plural):
        rt = self.srv.store.registry.get(group, version, plural)
        if rt is None:
            raise KeyError("%s/%s %s is not served" % (group, version, plural))
        return rt

    def get(self, group, version, plural, ns, name):
        try:
            return json.loads(json.dumps(self.srv.store.get(self._rt(group, version, plural), ns, name)))
        except fake_apiserver.ApiError as e:
            if e.code == 404:
                return None
            raise

    def list(self, group, version, plural, ns=None, label_selector=None):
        params = {"labelSelector": label_selector} if label_selector else {}
        items, _ = self.srv.store.list(self._rt(group, version, plural), ns, params)
        return json.loads(json.dumps(items))

    def install_crd(self, path=os.path.join(ROOT, "crds", "fleetjob.yaml")):
        """Creates a CustomResourceDefinition (as `kubectl apply` would; its group is served at once)."""
        import yaml   # Debian's python3-yaml, with python3-kubernetes
        with open(path) as f:
            crd = yaml.safe_load(f)
        self.srv.store.create(self._rt("apiextensions.k8s.io", "v1", "customresourcedefinitions"), "", crd)
        return crd["metadata"]["name"]

    def delete_crd(self, name):
        self.srv.store.delete(self._rt("apiextensions.k8s.io", "v1", "customresourcedefinitions"), "", name, {})

    def set_status(self, group, version, plural, ns, name, status):
        """Writes an object's status (what a controller of it, e.g. Volcano, would do)."""
        obj = self.get(group, version, plural, ns, name)
        obj["status"] = status
        self.srv.store.update(self._rt(group, version, plural), ns, name, obj, subresource="status")

    def job(self, ns, name):
        return self.get(FLEET_GROUP, FLEET_VERSION, "fleetjobs", ns, name)

    def pods(self, ns, job):
        return self.list("", "v1", "pods", ns, "fleet.paddlepaddle.org/job-name=" + job)

    def wait_for_phase(self, ns, name, phase, timeout=20.0):
        def check():
            job = self.job(ns, name)
            got = (job or {}).get("status", {}).get("phase")
            return job if got == phase else None
        try:
            return wait_for("FleetJob %s/%s to be %s" % (ns, name, phase), check, timeout)
        except Timeout as e:
            raise Timeout("%s\nstatus: %s\n%s" % (e, json.dumps((self.job(ns, name) or {}).get("status")),
                                                   self.logs()))

    # ---- the fake's control API (not logged, never faulted) ---------------------------------------
    def control(self, method, path, body=None):
        req = urllib.request.Request(self.srv.url + "/fake/v1/" + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")

    def requests(self):
        return self.control("GET", "requests")["requests"]

    def clear_requests(self):
        self.control("DELETE", "requests")

    def pod_action(self, ns, pod, body):
        return self.control("POST", "namespaces/%s/pods/%s" % (ns, pod), body)

    def append_log(self, ns, pod, text, container=None):
        body = {"text": text}
        if container:
            body["container"] = container
        return self.control("POST", "namespaces/%s/pods/%s/log" % (ns, pod), body)

    def create_namespace(self, name):
        if self.get("", "v1", "namespaces", "", name) is None:
            self.srv.store.create(self._rt("", "v1", "namespaces"), "", {"metadata": {"name": name}})


def http_get(url, timeout=5):
    """(status, body) of a GET; status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)
