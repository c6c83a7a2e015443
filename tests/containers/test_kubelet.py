"""The podman kubelet (tests/controlplane/podman_kubelet.py) does what a kubelet does, checked from
outside: through kubectl, the pods' own addresses, their logs and podman's view of the containers.

Run (ctest does):  /usr/bin/python3 -m unittest -v test_kubelet   (root, podman, scripts/images.sh)
"""

import json
import os
import subprocess
import tempfile
import time
import unittest
import urllib.request

from cluster import IMAGES, Cluster, container_status, require, wait_for

TOOLS = IMAGES["tools"]
# A pod's restarts without the kubelet's 10 s crash-loop back-off (the same code path, scaled).
os.environ.setdefault("FLEET_KUBELET_BACKOFF_SCALE", "0.1")


def pod(name, containers, **spec):
    spec.setdefault("restartPolicy", "Never")
    spec.setdefault("terminationGracePeriodSeconds", 5)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": dict(spec, containers=containers)}


def py(name, code, **extra):
    return dict({"name": name, "image": TOOLS, "command": ["python3", "-u", "-c", code]}, **extra)


class PodmanKubeletTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require([TOOLS])
        cls.cluster = Cluster()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def started_ns(self, pod_name, container):
        """podman's start time of a container's current run, in nanoseconds (statuses have seconds)."""
        name = self.cluster.container(pod_name, container)
        out = self.cluster.podman("container", "inspect", "--format", "{{.State.StartedAt.UnixNano}}", name).stdout
        return int(out.strip())

    def test_pod_address_env_probes_and_configmap_updates(self):
        c = self.cluster
        c.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-config"},
                 "data": {"greeting": "hello", "page": "v1"}})
        serve = ("import os, http.server, functools\n"
                 "print('env', os.environ['GREETING'], os.environ['POD_IP'], os.environ['URL'], os.environ['LITERAL'])\n"
                 "h = functools.partial(http.server.SimpleHTTPRequestHandler, directory='/config')\n"
                 "http.server.ThreadingHTTPServer((os.environ['POD_IP'], 8000), h).serve_forever()\n")
        c.apply(pod("web", [py("web", serve, ports=[{"name": "http", "containerPort": 8000}], env=[
            {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "web-config", "key": "greeting"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "URL", "value": "http://$(POD_IP):8000/$(GREETING)"},
            {"name": "LITERAL", "value": "$$(POD_IP)-$(UNDEFINED)"}],
            readinessProbe={"httpGet": {"path": "/page", "port": "http"}, "periodSeconds": 1},
            volumeMounts=[{"name": "config", "mountPath": "/config", "readOnly": True}])],
            volumes=[{"name": "config", "configMap": {"name": "web-config"}}]))
        p = wait_for("web ready", lambda: (lambda x: x if x and any(
            k["type"] == "Ready" and k["status"] == "True" for k in x["status"].get("conditions", [])) else None)(
            c.get("pod", "web")), timeout=60)
        ip = p["status"]["podIP"]
        self.assertNotEqual(ip, c.kubelet.gateway)
        self.assertEqual(ip.rsplit(".", 1)[0], c.kubelet.gateway.rsplit(".", 1)[0], "an address on the pod network")
        # The host reaches the pod at its own address; the env was resolved as the kubelet does.
        self.assertEqual(urllib.request.urlopen("http://%s:8000/page" % ip, timeout=5).read(), b"v1")
        logs = wait_for("env line", lambda: c.logs("web", "web").strip())
        self.assertEqual(logs.splitlines()[0], "env hello %s http://%s:8000/hello $(POD_IP)-$(UNDEFINED)" % (ip, ip))
        # A ConfigMap change reaches the mounted file, as the kubelet's sync does.
        c.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-config"},
                 "data": {"greeting": "hello", "page": "v2"}})
        wait_for("the page updated", lambda: urllib.request.urlopen(
            "http://%s:8000/page" % ip, timeout=5).read() == b"v2", timeout=20)
        c.kubectl("delete", "pod", "web", "--wait=true", timeout=60)

    def test_native_sidecar_gates_main_and_shares_pids(self):
        c = self.cluster
        sidecar = py("gate", "import time, pathlib\ntime.sleep(3)\npathlib.Path('/shared/open').touch()\n"
                     "time.sleep(3600)\n", restartPolicy="Always",
                     startupProbe={"exec": {"command": ["test", "-e", "/shared/open"]}, "periodSeconds": 1,
                                   "failureThreshold": 60},
                     volumeMounts=[{"name": "shared", "mountPath": "/shared"}])
        main = py("main", "import os\ndef cmdline(p):\n    try:\n        return open('/proc/%s/cmdline' % p, 'rb').read()\n"
                  "    except OSError:\n        return b''\n"
                  "procs = [cmdline(p) for p in os.listdir('/proc') if p.isdigit()]\n"
                  "print('gate visible:', any(b'/shared/open' in x for x in procs))\n"
                  "print('gate open:', os.path.exists('/shared/open'))\n",
                  volumeMounts=[{"name": "shared", "mountPath": "/shared"}])
        c.apply(pod("gated", [main], initContainers=[sidecar], shareProcessNamespace=True,
                    volumes=[{"name": "shared", "emptyDir": {}}]))
        p = c.wait_phase("gated", ("Succeeded", "Failed"), timeout=60)
        self.assertEqual(p["status"]["phase"], "Succeeded", json.dumps(p["status"], indent=1))
        self.assertEqual(c.logs("gated", "main").split("\n")[:2], ["gate visible: True", "gate open: True"])
        gate = container_status(p, "gate")
        # The sidecar was stopped once the main container finished; the pod's phase is the main's.
        self.assertIn("terminated", gate["state"])
        started_gate = gate["state"]["terminated"]["startedAt"]
        started_main = container_status(p, "main")["state"]["terminated"]["startedAt"]
        self.assertGreaterEqual(time.mktime(time.strptime(started_main, "%Y-%m-%dT%H:%M:%SZ")) -
                                time.mktime(time.strptime(started_gate, "%Y-%m-%dT%H:%M:%SZ")), 2,
                                "main started %s, only after the sidecar's startup probe passed (%s + 3 s)"
                                % (started_main, started_gate))

    def test_security_context_reaches_the_container(self):
        c = self.cluster
        restricted = {"runAsNonRoot": True, "runAsUser": 65532, "readOnlyRootFilesystem": True,
                      "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        code = ("import os\nprint('uid', os.getuid())\n"
                "print('caps', [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])\n"
                "print('nnp', [l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0])\n"
                "try:\n    open('/written', 'w')\n    print('rootfs writable')\nexcept OSError as e:\n"
                "    print('rootfs', e.strerror)\n")
        c.apply(pod("restricted", [py("main", code, securityContext=restricted,
                                      resources={"limits": {"memory": "128Mi", "cpu": "500m"}})]))
        p = c.wait_phase("restricted", ("Succeeded", "Failed"))
        self.assertEqual(p["status"]["phase"], "Succeeded")
        self.assertEqual(c.logs("restricted", "main").splitlines(),
                         ["uid 65532", "caps 0000000000000000", "nnp 1", "rootfs Read-only file system"])
        if c.kubelet.enforce_limits:
            name = c.container("restricted", "main")
            mem = c.podman("container", "inspect", "--format", "{{.HostConfig.Memory}}", name).stdout.strip()
            self.assertEqual(mem, str(128 * 1024 * 1024))
        # runAsNonRoot against a root user: refused as the kubelet refuses it, nothing runs.
        c.apply(pod("as-root", [py("main", "print('ran')", securityContext={"runAsNonRoot": True, "runAsUser": 0})]))
        st = wait_for("the refusal", lambda: (lambda x: x if x and "waiting" in x["state"] and
                                              x["state"]["waiting"]["reason"] == "CreateContainerConfigError" else None)(
            container_status(c.get("pod", "as-root"), "main")))
        self.assertIn("runAsNonRoot and image will run as root", st["state"]["waiting"]["message"])
        self.assertEqual(c.get("pod", "as-root")["status"]["phase"], "Pending")
        c.kubectl("delete", "pod", "as-root", "restricted", "--wait=true", timeout=60)

    def test_restart_policy_restart_counts_and_previous_logs(self):
        c = self.cluster
        code = ("import os, time\nruns = len(os.listdir('/state'))\nopen('/state/%d' % runs, 'w').close()\n"
                "print('run', runs)\nraise SystemExit(0 if runs == 2 else 3)\n")
        c.apply(pod("flaky", [py("main", code, volumeMounts=[{"name": "state", "mountPath": "/state"}])],
                    restartPolicy="OnFailure", volumes=[{"name": "state", "emptyDir": {}}]))
        p = c.wait_phase("flaky", ("Succeeded", "Failed"), timeout=90)
        st = container_status(p, "main")
        self.assertEqual(p["status"]["phase"], "Succeeded")
        self.assertEqual(st["restartCount"], 2)
        self.assertEqual(st["lastState"]["terminated"]["exitCode"], 3)
        self.assertEqual(st["lastState"]["terminated"]["reason"], "Error")
        self.assertEqual(st["state"]["terminated"]["reason"], "Completed")
        self.assertEqual(c.logs("flaky", "main").strip(), "run 2")
        self.assertEqual(c.logs("flaky", "main", previous=True).strip(), "run 1")
        # Never: the first failure is the pod's end, with the container's exit code.
        c.apply(pod("fails", [py("main", "raise SystemExit(7)")]))
        p = c.wait_phase("fails", ("Succeeded", "Failed"))
        self.assertEqual(p["status"]["phase"], "Failed")
        self.assertEqual(container_status(p, "main")["state"]["terminated"]["exitCode"], 7)
        self.assertEqual(container_status(p, "main")["restartCount"], 0)
        c.kubectl("delete", "pod", "flaky", "fails", "--wait=true", timeout=60)

    def test_deletion_sends_sigterm_then_sigkill_after_the_grace_period(self):
        c = self.cluster
        out = tempfile.mkdtemp(prefix="fleetjob-term-")
        os.chmod(out, 0o777)
        polite = ("import signal, sys, time\n"
                  "def term(*_):\n    open('/out/polite', 'w').write('SIGTERM')\n    sys.exit(0)\n"
                  "signal.signal(signal.SIGTERM, term)\nprint('up')\ntime.sleep(3600)\n")
        stubborn = ("import signal, time\nsignal.signal(signal.SIGTERM, lambda *_: open('/out/stubborn', 'w')"
                    ".write('ignored'))\nprint('up')\ntime.sleep(3600)\n")
        mount = [{"name": "out", "mountPath": "/out"}]
        c.apply(pod("polite", [py("main", polite, volumeMounts=mount)], volumes=[{"name": "out", "hostPath": {"path": out}}]))
        c.apply(pod("stubborn", [py("main", stubborn, volumeMounts=mount)], terminationGracePeriodSeconds=4,
                    volumes=[{"name": "out", "hostPath": {"path": out}}]))
        for name in ("polite", "stubborn"):
            c.wait_phase(name, ("Running",))
            wait_for("%s up" % name, lambda: "up" in c.logs(name, "main"))
        t0 = time.monotonic()
        c.kubectl("delete", "pod", "polite", "--wait=true", timeout=60)
        polite_s = time.monotonic() - t0
        t0 = time.monotonic()
        c.kubectl("delete", "pod", "stubborn", "--wait=true", timeout=60)
        stubborn_s = time.monotonic() - t0
        for name, text in (("polite", "SIGTERM"), ("stubborn", "ignored")):
            with open(os.path.join(out, name)) as f:
                self.assertEqual(f.read(), text)
        self.assertLess(polite_s, 4, "a container that exits on SIGTERM is gone at once")
        self.assertGreaterEqual(stubborn_s, 4, "one that ignores it is killed after the grace period")
        self.assertLess(stubborn_s, 20)
        left = c.podman("ps", "-a", "--filter", "label=io.fleetjob.kubelet=" + c.kubelet.id, "--format",
                        "{{.Names}}").stdout.split()
        self.assertEqual([n for n in left if "_polite_" in n or "_stubborn_" in n], [], "no container left behind")

    def test_service_account_token_reaches_the_api_server_from_the_pod(self):
        c = self.cluster
        code = ("import os, ssl, json, urllib.request, urllib.error\n"
                "d = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
                "ns, token = open(d + '/namespace').read(), open(d + '/token').read()\n"
                "ctx = ssl.create_default_context(cafile=d + '/ca.crt')\n"
                "url = 'https://%s:%s/api/v1/namespaces/%s/pods/%s' % (os.environ['KUBERNETES_SERVICE_HOST'],"
                " os.environ['KUBERNETES_SERVICE_PORT'], ns, os.environ['HOSTNAME'])\n"
                "for t in (token, 'not-' + token):\n"
                "    req = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + t})\n"
                "    try:\n        r = urllib.request.urlopen(req, context=ctx, timeout=10)\n"
                "        print(r.status, json.load(r)['status']['podIP'])\n"
                "    except urllib.error.HTTPError as e:\n        print(e.code)\n")
        c.apply(pod("in-cluster", [py("main", code, securityContext={"runAsUser": 65532})]))
        p = c.wait_phase("in-cluster", ("Succeeded", "Failed"))
        self.assertEqual(c.logs("in-cluster", "main").splitlines(), ["200 " + p["status"]["podIP"], "401"])
        # The API server answers pods only at the gateway and on loopback, not on other addresses.
        self.assertEqual(c.server.gateway_httpd.server_address[0], c.kubelet.gateway)
        c.kubectl("delete", "pod", "in-cluster", "--wait=true", timeout=60)

    def test_what_a_killed_kubelet_left_is_removed_by_the_next(self):
        pm = self.cluster.kubelet.podman
        dead = subprocess.Popen(["true"])
        dead.wait()
        labels = ["--label", "io.fleetjob.kubelet=gone", "--label", "io.fleetjob.kubelet.pid=%d" % dead.pid]
        pm.run("network", "create", *labels, "fleetjob-kubelet-gone-test")
        pm.run("pod", "create", "--name", "fleetjob-kubelet-gone-test", "--infra-image",
               self.cluster.kubelet.pause_image, *labels)
        Cluster().close()
        self.assertNotEqual(pm.run("network", "exists", "fleetjob-kubelet-gone-test", check=False).returncode, 0)
        self.assertNotEqual(pm.run("pod", "exists", "fleetjob-kubelet-gone-test", check=False).returncode, 0)
        self.assertEqual(pm.run("pod", "exists", self.cluster.kubelet.anchor, check=False).returncode, 0,
                         "a live kubelet's pods stay")


if __name__ == "__main__":
    unittest.main()
