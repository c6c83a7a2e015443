"""The podman kubelet's pure parts, as the kubelet defines them: $(VAR) expansion, env resolution,
quantities, the atomic writer of ConfigMap and projected volumes, the crash-loop back-off, and a pod
worker's restarts and probe kills against a podman stand-in. No podman needed (the container tests
in tests/containers run the rest).

Run (ctest does):  /usr/bin/python3 -m unittest -v test_podman_kubelet
"""

import http.server
import json
import os
import tempfile
import threading
import time
import types
import unittest

import podman_kubelet as pk

POD = {"metadata": {"name": "p", "namespace": "team", "uid": "u-1", "labels": {"app": "x", "b": "2"},
                    "annotations": {"a/b": "c"}},
       "spec": {"nodeName": "node-0", "serviceAccountName": "sa",
                "containers": [{"name": "main", "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}}}]},
       "status": {"podIP": "10.89.0.7", "hostIP": "10.89.0.1", "podIPs": [{"ip": "10.89.0.7"}]}}


class ExpansionTest(unittest.TestCase):
    def test_as_kubernetes_expands(self):
        env = {"A": "1", "B": "x y"}
        self.assertEqual(pk.expand("$(A)-$(B)", env), "1-x y")
        self.assertEqual(pk.expand("$$(A)", env), "$(A)", "$$ is a literal $")
        self.assertEqual(pk.expand("$(MISSING)", env), "$(MISSING)", "unknown names stay")
        self.assertEqual(pk.expand("$A $(A", env), "$A $(A", "not references")
        self.assertEqual(pk.expand("$$$(A)", env), "$1")


class ResolveEnvTest(unittest.TestCase):
    def lookup(self, kind, name):
        return {("configmaps", "cm"): {"k": "v", "other": "o"}, ("secrets", "s"): {"pw": "hunter2"}}.get((kind, name))

    def test_values_refs_and_order(self):
        c = {"name": "main", "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
             "env": [{"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                     {"name": "URL", "value": "http://$(IP):80/$(CM_k)"},
                     {"name": "LABEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                     {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                     {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                     {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                     {"name": "KEY", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
                     {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}}},
                     {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": True}}},
                     {"name": "LATER", "value": "$(AFTER)"}, {"name": "AFTER", "value": "a"}]}
        env = pk.resolve_env(POD, c, {"KUBERNETES_SERVICE_HOST": "10.89.0.1"}, self.lookup)
        self.assertEqual(env["URL"], "http://10.89.0.7:80/v")
        self.assertEqual(env["CM_other"], "o")
        self.assertEqual((env["LABEL"], env["NODE"], env["CPU"], env["MEM_MI"]), ("x", "node-0", "2", "1024"))
        self.assertEqual((env["KEY"], env["PW"]), ("v", "hunter2"))
        self.assertNotIn("OPT", env)
        self.assertEqual(env["LATER"], "$(AFTER)", "only earlier names expand")
        self.assertEqual(list(env)[0], "KUBERNETES_SERVICE_HOST", "service variables first")

    def test_missing_references_are_config_errors(self):
        for ref, message in (({"configMapKeyRef": {"name": "gone", "key": "k"}}, 'configmap "gone" not found'),
                             ({"configMapKeyRef": {"name": "cm", "key": "nope"}}, "couldn't find key nope"),
                             ({"secretKeyRef": {"name": "gone", "key": "k"}}, 'secret "gone" not found'),
                             ({"fieldRef": {"fieldPath": "spec.bogus"}}, "unsupported fieldPath")):
            with self.assertRaises(pk.ConfigError) as e:
                pk.resolve_env(POD, {"name": "main", "env": [{"name": "X", "valueFrom": ref}]}, {}, self.lookup)
            self.assertIn(message, str(e.exception))

    def test_quantities(self):
        self.assertEqual(pk.quantity("500m"), 0.5)
        self.assertEqual(pk.quantity("1Gi"), 2 ** 30)
        self.assertEqual(pk.quantity("2"), 2)
        with self.assertRaises(pk.ConfigError):
            pk.quantity("1 Gi")


class SubPathTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.volume = os.path.join(self.dir.name, "volume")
        os.makedirs(self.volume)

    def tearDown(self):
        self.dir.cleanup()

    def test_inside_the_volume_is_created(self):
        src = pk.sub_path_source(self.volume, "a/b", "v")
        self.assertEqual(src, os.path.join(os.path.realpath(self.volume), "a", "b"))
        self.assertTrue(os.path.isdir(src))

    def test_leaving_the_volume_is_a_config_error(self):
        os.symlink(self.dir.name, os.path.join(self.volume, "link"))
        for sub_path in ("..", "../outside", "a/../../outside", "/etc", "link/outside"):
            with self.assertRaisesRegex(pk.ConfigError, "subPath '%s' of volume v leaves the volume" % sub_path):
                pk.sub_path_source(self.volume, sub_path, "v")
        self.assertEqual(sorted(os.listdir(self.dir.name)), ["volume"], "nothing was created outside")


def read(path):
    with open(path, "rb") as f:
        return f.read()


class AtomicWriterTest(unittest.TestCase):
    def test_publishes_swaps_and_removes(self):
        with tempfile.TemporaryDirectory() as d:
            target = os.path.join(d, "vol")
            self.assertTrue(pk.write_atomic(target, {"a": b"1", "dir/b": b"2"}))
            self.assertEqual(read(os.path.join(target, "a")), b"1")
            self.assertEqual(read(os.path.join(target, "dir", "b")), b"2")
            self.assertTrue(os.path.islink(os.path.join(target, "a")))
            first = os.readlink(os.path.join(target, "..data"))
            self.assertFalse(pk.write_atomic(target, {"a": b"1", "dir/b": b"2"}), "unchanged: nothing written")
            self.assertTrue(pk.write_atomic(target, {"a": b"changed"}))
            self.assertEqual(read(os.path.join(target, "a")), b"changed")
            self.assertNotEqual(os.readlink(os.path.join(target, "..data")), first)
            self.assertFalse(os.path.lexists(os.path.join(target, "dir")), "a key that left is removed")
            self.assertFalse(os.path.exists(os.path.join(target, first)), "the old generation is removed")
            self.assertEqual(oct(os.stat(os.path.join(target, "a")).st_mode & 0o777), oct(0o644))

    def test_podman_times(self):
        self.assertEqual(pk.podman_time("2026-11-26 08:00:01.123456789 +0000 UTC"), "2026-11-26T08:00:01Z")
        self.assertAlmostEqual(pk._epoch("2026-11-26T08:00:01.5+01:00"), pk._epoch("2026-11-26T07:00:01Z") + 0.5)



class TerminationMessageTest(unittest.TestCase):
    """FallbackToLogsOnError from podman's k8s-file log, as the kubelet reads the log's tail."""

    def test_k8s_file_lines_join_partials(self):
        data = (b"2026-01-01T00:00:00.1+00:00 stdout P abc\n2026-01-01T00:00:00.2+00:00 stdout F def\n"
                b"2026-01-01T00:00:01.0+00:00 stderr F NCCL error\n2026-01-01T00:00:02.0+00:00 stdout F cut")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "main-1.log")
            with open(path, "wb") as f:
                f.write(data)
            self.assertEqual(pk.log_texts(path), ["abcdef\n", "NCCL error\n"])
            self.assertEqual(pk.log_texts(os.path.join(d, "none.log")), [])

    def test_message_is_the_tail_only_under_the_policy_and_a_failure(self):
        from fakeapi.kubelet import Kubelet
        fallback = {"name": "main", "terminationMessagePolicy": "FallbackToLogsOnError"}
        lines = ["line %d\n" % i for i in range(100)]
        self.assertEqual(Kubelet.termination_message(fallback, 1, lines), "".join(lines[20:]))
        self.assertEqual(len(Kubelet.termination_message(fallback, 1, ["y" * 5000 + "\n"])), 2048)
        self.assertEqual(Kubelet.termination_message(fallback, 0, lines), "")
        self.assertEqual(Kubelet.termination_message({"name": "main"}, 1, lines), "")
        self.assertEqual(Kubelet.termination_message(fallback, 1, lines, "written"), "written")


class PreStopHookTest(unittest.TestCase):
    """lifecycle.preStop before SIGTERM, within the grace period (pre_stop_hooks)."""

    def setUp(self):
        self.paths, self.release, self.answered = [], threading.Event(), threading.Event()
        test = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                test.paths.append(self.path)
                test.release.wait(30)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                test.answered.set()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.failed = []

    def tearDown(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def ctr(self, name, hook=None):
        spec = {"name": name}
        if hook is not None:
            spec["lifecycle"] = {"preStop": hook}
        return types.SimpleNamespace(name=name, spec=spec, podman_name="pod-" + name)

    def http_hook(self):
        return {"httpGet": {"path": "/checkpoint?reason=preStop", "port": self.server.server_address[1]}}

    def test_the_http_hook_is_waited_for(self):
        threading.Timer(0.2, self.release.set).start()
        pk.pre_stop_hooks([self.ctr("main", self.http_hook()), self.ctr("other")], "127.0.0.1", None,
                          time.monotonic() + 30, self.failed.append)
        self.assertEqual(self.paths, ["/checkpoint?reason=preStop"])
        self.assertTrue(self.answered.is_set(), "returned only after the hook's answer")
        self.assertEqual(self.failed, [])

    def test_the_grace_period_bounds_a_hook_that_does_not_answer(self):
        main = self.ctr("main", self.http_hook())
        pk.pre_stop_hooks([main], "127.0.0.1", None, time.monotonic() + 0.5, self.failed.append)
        self.assertFalse(self.answered.is_set(), "the hook was still waiting")
        self.assertEqual(self.failed, [main])
        # A sleep hook longer than the grace period is cut short too (this returns).
        pk.pre_stop_hooks([self.ctr("main", {"sleep": {"seconds": 3600}})], "127.0.0.1", None,
                          time.monotonic() + 0.2, lambda c: None)

    def test_an_exec_hook_runs_in_its_container(self):
        calls = []

        class Podman:
            def run(self, *args, check=True, timeout=None):
                calls.append(args)
                return types.SimpleNamespace(returncode=1 if "fail" in args else 0)

        ok, bad = self.ctr("main", {"exec": {"command": ["/bin/save"]}}), self.ctr("side", {"exec": {"command": ["fail"]}})
        pk.pre_stop_hooks([ok, bad], "127.0.0.1", Podman(), time.monotonic() + 30, self.failed.append)
        self.assertEqual(sorted(calls), [("exec", "pod-main", "/bin/save"), ("exec", "pod-side", "fail")])
        self.assertEqual(self.failed, [bad])


class CrashLoopBackOffTest(unittest.TestCase):
    def test_the_first_restart_is_immediate_then_ten_seconds_doubling_to_five_minutes(self):
        b = pk.CrashLoopBackOff()
        self.assertEqual([b.delay(1) for _ in range(8)], [0, 10, 20, 40, 80, 160, 300, 300])

    def test_ten_minutes_of_running_start_it_over(self):
        b = pk.CrashLoopBackOff()
        self.assertEqual([b.delay(1), b.delay(1), b.delay(599), b.delay(600), b.delay(1)], [0, 10, 20, 0, 10])

    def test_the_scale_shortens_every_duration(self):
        b = pk.CrashLoopBackOff(0.1)
        self.assertEqual([round(b.delay(1), 6) for _ in range(3)], [0, 1, 2])
        self.assertEqual(b.delay(60), 0, "a run of 60 s is 10 min scaled")


class FakePodman:
    """podman as the pod worker calls it: records the commands; a container starts and is
    inspected; waits end as if the container was removed."""

    def __init__(self):
        self.calls = []

    def run(self, *args, check=True, timeout=180, input=None):
        self.calls.append(args)
        gone = args[0] in ("wait", "container") and args[:2] != ("container", "inspect")
        return types.SimpleNamespace(returncode=1 if gone else 0, stdout="", stderr="")

    def json(self, *args, **kw):
        self.calls.append(args)
        return [{"Id": "id-%s" % args[-1], "Image": "img", "State": {"StartedAt": "2026-11-29 04:00:00 +0000 UTC"}}]


class PodWorkerRestartTest(unittest.TestCase):
    """A pod worker's restarts per restartPolicy and its probe kills (PodWorker with podman and the
    kubelet stood in for: what it asks podman, and the status it keeps)."""

    def setUp(self):
        from fakeapi.kubelet import Kubelet
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.podman = FakePodman()
        self.store = types.SimpleNamespace(lock=threading.RLock(), logs={}, prev_logs={})
        self.kubelet = types.SimpleNamespace(
            store=self.store, root=self.dir.name, podman=self.podman, backoff_scale=1.0, log=lambda msg: None,
            termination_message=Kubelet.termination_message, gateway="10.89.0.1", id="k", enforce_limits=False,
            local_image=lambda image: image, service_env=dict, _current=lambda ns, name, uid: None)

    def worker(self, policy, probe=None):
        main = {"name": "main", "image": "tools"}
        if probe:
            main["livenessProbe"] = probe
        spec = {"restartPolicy": policy, "terminationGracePeriodSeconds": 30, "automountServiceAccountToken": False,
                "containers": [main]}
        return pk.PodWorker(self.kubelet, {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": spec})

    def start(self, w):
        c = w._ctr("main")
        w._start_container(c)
        self.addCleanup(w._stop_probes, c)
        self.addCleanup(c.tailer.finish.set)
        return c

    def exit(self, w, code):
        c = w._ctr("main")
        w._handle(("exited", "main", c.gen, code, False, "2026-11-29T04:00:00Z", "2026-11-29T04:00:01Z"))
        return c

    def test_a_failed_container_runs_again_in_the_same_pod(self):
        w = self.worker("OnFailure")
        self.start(w)
        c = self.exit(w, 3)
        self.assertEqual(c.state["terminated"]["exitCode"], 3)
        self.assertFalse(c.done)
        self.assertLessEqual(c.next_start, time.monotonic(), "the first restart is immediate")
        self.start(w)
        st = c.status()
        self.assertEqual(st["restartCount"], 1)
        self.assertIn("running", st["state"])
        last = st["lastState"]["terminated"]
        self.assertEqual((last["exitCode"], last["reason"]), (3, "Error"))
        creates = [a for a in self.podman.calls if a[0] == "create"]
        self.assertEqual([a[a.index("--name") + 1] for a in creates],
                         [w.podman_pod + "_main_1", w.podman_pod + "_main_2"])
        self.assertTrue(all(a[a.index("--pod") + 1] == w.podman_pod for a in creates), "the same pod: its network")

    def test_later_restarts_wait_out_the_back_off_and_say_so(self):
        w = self.worker("Always")
        self.start(w)
        self.exit(w, 0)
        self.start(w)
        before = time.monotonic()
        c = self.exit(w, 0)
        self.assertGreaterEqual(c.next_start, before + 10)
        self.assertLessEqual(c.next_start, time.monotonic() + 10)
        st = c.status()
        self.assertEqual(st["state"]["waiting"]["reason"], "CrashLoopBackOff")
        self.assertIn("back-off 10s restarting failed container=main", st["state"]["waiting"]["message"])
        self.assertEqual(st["lastState"]["terminated"]["reason"], "Completed")
        self.start(w)
        self.assertEqual((c.status()["restartCount"], c.status()["lastState"]["terminated"]["exitCode"]), (2, 0))

    def test_what_the_policy_does_not_restart_is_done(self):
        for policy, code in (("OnFailure", 0), ("Never", 1), ("Never", 0)):
            w = self.worker(policy)
            self.start(w)
            c = self.exit(w, code)
            self.assertTrue(c.done, (policy, code))
            self.assertEqual(c.status()["state"]["terminated"]["exitCode"], code)

    def test_a_failed_liveness_probe_stops_the_container_within_its_grace_period(self):
        for probe, grace in (({"httpGet": {"path": "/trainer-live", "port": 8081}, "terminationGracePeriodSeconds": 5},
                              "5"),
                             ({"exec": {"command": ["false"]}}, "30")):
            w = self.worker("OnFailure", probe)
            c = self.start(w)
            w._handle(("probe", "main", c.gen, "liveness", False))
            self.assertEqual(self.podman.calls[-1], ("stop", "-t", grace, c.podman_name))
            self.exit(w, 137)
            self.assertFalse(c.done, "restarted per the pod's restartPolicy")
            self.assertEqual(c.status()["state"]["terminated"]["exitCode"], 137)
        self.start(w)
        calls = len(self.podman.calls)
        w._handle(("probe", "main", c.gen - 1, "liveness", False))
        self.assertEqual(len(self.podman.calls), calls, "a probe of the run before is ignored")


if __name__ == "__main__":
    unittest.main()
