"""A cluster whose pods are real containers, for the container tests.

The fake API server (tests/controlplane) runs in this process with its podman kubelet: pods get
their own network namespace and address on a podman network, and the API server is reachable
from them at the network's gateway over TLS. The tests drive it as users would, with kubectl and a
kubeconfig (a bearer token, the server's CA); they read pods through the API too.

Where podman cannot run pods (not installed, not root) the tests skip with the reason, unless
FLEET_REQUIRE_CONTAINERS=1 (CI): then a skip is a failure. The images come from scripts/images.sh;
a missing one is treated the same way.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "controlplane"))
sys.path.insert(0, os.path.join(ROOT, "tests", "chart"))
sys.dont_write_bytecode = True
import fake_apiserver  # noqa: E402
import fleet_cluster  # noqa: E402
import podman_kubelet  # noqa: E402


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(fleetjob VERSION"):
                return line.split()[2]
    raise RuntimeError("no version in CMakeLists.txt")


VERSION = version()
IMAGES = {name: "fleetjob/%s:%s" % (name, VERSION) for name in ("operator", "sidecar", "tools")}
BASE_IMAGE = "localhost/debian:12-slim"
TOKEN = "e2e-tester-token"
KUBECTL = shutil.which("kubectl")


def skip_or_fail(reason):
    if os.environ.get("FLEET_REQUIRE_CONTAINERS") == "1":
        raise AssertionError("container tests are required here (FLEET_REQUIRE_CONTAINERS=1) but cannot run: "
                             + reason)
    raise unittest.SkipTest(reason)


def require(images=()):
    """Skips (or fails in CI) unless podman runs pods here and the images exist."""
    conf = podman_kubelet.default_conf()
    if conf and "CONTAINERS_CONF" not in os.environ:
        os.environ["CONTAINERS_CONF"] = conf
    reason = podman_kubelet.unavailable_reason(conf)
    if reason:
        skip_or_fail(reason)
    if KUBECTL is None:
        skip_or_fail("kubectl is not installed")
    pm = podman_kubelet.Podman(conf)
    missing = [i for i in images if pm.run("image", "exists", "localhost/" + i if "/" in i and not
                                           i.startswith("localhost/") else i, check=False).returncode != 0]
    if missing:
        skip_or_fail("images %s are not built: run scripts/images.sh" % ", ".join(missing))


def wait_for(what, check, timeout=60.0, poll=0.2):
    """fleet_cluster.wait_for with the longer waits containers need."""
    return fleet_cluster.wait_for(what, check, timeout, poll)


class Cluster:
    """The API server with its podman kubelet, a kubeconfig and kubectl."""

    def __init__(self, nodes=1):
        self.dir = tempfile.mkdtemp(prefix="fleetjob-containers-")
        self.server = fake_apiserver.FakeApiServer(kubelet="podman", nodes=nodes, tokens=[TOKEN]).start()
        self.kubelet = self.server.kubelet
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        with open(self.kubeconfig, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n"
                    "    server: %s\n    certificate-authority: %s\ncontexts:\n- name: e2e\n  context:\n"
                    "    cluster: e2e\n    user: tester\n    namespace: default\ncurrent-context: e2e\n"
                    "users:\n- name: tester\n  user:\n    token: %s\n" % (self.server.url, self.server.tls_cert, TOKEN))

    def close(self):
        self.server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- clients ---------------------------------------------------------------------
    def kubectl(self, *args, check=True, input=None, timeout=60):
        p = subprocess.run([KUBECTL, "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True,
                           input=input, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError("kubectl %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr))
        return p.stdout

    def apply(self, obj, namespace="default"):
        return self.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))

    def get(self, kind, name, namespace="default"):
        p = subprocess.run([KUBECTL, "--kubeconfig", self.kubeconfig, "get", kind, name, "-n", namespace, "-o", "json"],
                           capture_output=True, text=True, timeout=60)
        return json.loads(p.stdout) if p.returncode == 0 else None

    def pods(self, selector, namespace="default"):
        return json.loads(self.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json"))["items"]

    def logs(self, pod, container, namespace="default", previous=False):
        args = ["logs", "-n", namespace, pod, "-c", container] + (["--previous"] if previous else [])
        return self.kubectl(*args)

    def wait_phase(self, name, phases, namespace="default", timeout=90):
        def phase():
            pod = self.get("pod", name, namespace)
            return pod if pod and pod.get("status", {}).get("phase") in phases else None
        return wait_for("pod %s in %s" % (name, phases), phase, timeout)

    # ---- podman underneath ---------------------------------------------------------------
    def podman(self, *args, check=True):
        return self.kubelet.podman.run(*args, check=check)

    def container(self, pod, container, namespace="default"):
        return self.kubelet.container_name(namespace, pod, container)


def container_status(pod, name):
    st = pod.get("status", {})
    return next(s for s in (st.get("containerStatuses") or []) + (st.get("initContainerStatuses") or [])
                if s["name"] == name)
