"""The gate hook of runtime/python/sitecustomize.py (in-place restart: the trainer's side of
fleet-sidecar's GET /gate, docs/env-contract.md "The gate") in a real Python started with it on
PYTHONPATH, as the operator mounts it, against a stub of the sidecar's gate. Run:
    python3 tests/sidecar/test_gate_hook.py
The sidecar's side is tests/sidecar/trainer_attempts_test.cc and agent_binary_test.cc."""
import http.server
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
HOOK_DIR = os.path.join(HERE, "..", "..", "runtime", "python")
# Loaded as a library under another name (nothing runs), not as the `sitecustomize` Python may
# already have imported from elsewhere at start-up.
_spec = importlib.util.spec_from_file_location("fleet_gate_hook", os.path.join(HOOK_DIR, "sitecustomize.py"))
hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook)

# What the trainer's program prints: its gate env, and its child's (a Python it starts).
PROGRAM = r"""
import json, os, subprocess, sys
keys = ("FLEET_RUN", "FLEET_GATE_PASSED", "PADDLE_TRAINER_ENDPOINTS")
child = subprocess.check_output([sys.executable, "-c",
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in %r}))" % (keys,)])
print(json.dumps({"self": {k: os.environ.get(k) for k in keys}, "child": json.loads(child)}))
"""


class StubGate:
    """A sidecar's gate: answers (status, body) in turn (the last one again once they run out) and
    records the queries. `sock`: a socket bound (not listening) to serve on, once start() is called."""

    def __init__(self, answers, sock=None):
        self.answers, self.queries = list(answers), []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                path, _, query = self.path.partition("?")
                stub.queries.append(query)
                status, body = stub.answers.pop(0) if len(stub.answers) > 1 else stub.answers[0]
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=sock is None)
        if sock is not None:
            self.server.socket.close()
            self.server.socket = sock
        self.port = self.server.socket.getsockname()[1]
        self.url = "http://127.0.0.1:%d/gate" % self.port
        self.thread = None

    def start(self):
        if self.thread is None:
            self.server.server_activate()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def pod_env(**more):
    """A main container's env in an InPlace job; a proxy that would fail every request (the gate is
    on loopback: never asked through one)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": HOOK_DIR, "FLEET_RUN": "3",
           "http_proxy": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    env.update({k: v for k, v in more.items() if v is not None})
    return env


def run_trainer(env, timeout=60):
    return subprocess.run([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout)


class FindInstanceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.proc = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def start(self, pid, parent, start_time, comm="python3"):
        os.makedirs(os.path.join(self.proc, str(pid)), exist_ok=True)
        with open(os.path.join(self.proc, str(pid), "stat"), "w") as f:
            f.write("%d (%s) S %d 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 %d 1000 100 18446744073709551615\n" %
                    (pid, comm, parent, start_time))

    def test_the_instance_is_the_ancestor_whose_parent_is_outside_the_namespace(self):
        self.start(7, 0, 5000, "sh")
        self.start(30, 7, 5100, "fleetrun")
        self.start(31, 30, 5200, "python3 (a) ) b")   # a command name may hold ") "
        self.assertEqual(hook.find_instance(self.proc, 31), "7:5000")
        self.assertEqual(hook.find_instance(self.proc, 7), "7:5000")

    def test_an_unreadable_or_malformed_proc_is_an_error(self):
        self.start(31, 30, 5200)   # its parent is gone
        with self.assertRaisesRegex(hook.GateError, "cannot read .*/30/stat"):
            hook.find_instance(self.proc, 31)
        with open(os.path.join(self.proc, "31", "stat"), "w") as f:
            f.write("31 (python3) S 0 1")
        with self.assertRaisesRegex(hook.GateError, "/31/stat is not a process's status line"):
            hook.find_instance(self.proc, 31)

    def test_the_real_instance_of_this_process(self):
        pid, start = hook.find_instance().split(":")
        with open("/proc/%s/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        self.assertEqual((fields[1], fields[19]), ("0", start))


class GateHookTest(unittest.TestCase):
    def setUp(self):
        self.stubs = []

    def tearDown(self):
        for stub in self.stubs:
            stub.stop()

    def stub(self, answers, sock=None, start=True):
        stub = StubGate(answers, sock)
        self.stubs.append(stub)
        return stub.start() if start else stub

    def test_it_waits_while_202_then_takes_the_answered_run_and_its_children_do_not_ask(self):
        gate = self.stub([(202, {"waiting": "the operator holds run 4 at its barrier", "run": 4}), (200, {"run": 4})])
        done = run_trainer(pod_env(FLEET_GATE_URL=gate.url))
        self.assertEqual(done.returncode, 0, done.stderr)
        passed = {"FLEET_RUN": "4", "FLEET_GATE_PASSED": "4", "PADDLE_TRAINER_ENDPOINTS": None}
        self.assertEqual(json.loads(done.stdout), {"self": passed, "child": passed})
        self.assertEqual(len(gate.queries), 2, gate.queries)   # the child did not ask
        self.assertIn("the operator holds run 4 at its barrier", done.stderr)
        # The question: the run it was started for, and this container start (here: this test's
        # ancestor whose parent is 0: the trainer is its descendant).
        self.assertEqual(gate.queries[0], "run=3&instance=" + hook.find_instance())

    def test_without_the_url_or_once_passed_nothing_is_asked(self):
        gate = self.stub([(200, {"run": 9})])
        for env in (pod_env(), pod_env(FLEET_GATE_URL=gate.url, FLEET_GATE_PASSED="3")):
            done = run_trainer(env)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertEqual(json.loads(done.stdout)["self"]["FLEET_RUN"], "3")
        self.assertEqual(gate.queries, [])
        # Nor is its HTTP client imported: every Python start in the pod runs the module.
        loaded = subprocess.run([sys.executable, "-c", "import sys; print('urllib.request' in sys.modules)"],
                                env=pod_env(), stdout=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(loaded.stdout, "False\n")

    def test_it_fails_closed_on_a_refusal_or_an_answer_it_cannot_read(self):
        for answer, message in (
                ((400, "run: expected the run the trainer was started for\n"),
                 "fleetjob gate: the gate answered 400: run: expected the run the trainer was started for"),
                ((404, "no such path: /gate\n"), "the gate answered 404"),
                ((200, {"run": "4"}), "the gate answered 200"),
                ((200, {"run": -1}), "the gate answered 200"),
                ((200, "run 4"), "the gate answered 200"),
                ((202, {"run": 4}), "the gate answered 202"),
                ((204, ""), "the gate answered 204")):
            gate = self.stub([answer])
            done = run_trainer(pod_env(FLEET_GATE_URL=gate.url))
            self.assertEqual(done.returncode, 1, answer)
            self.assertEqual(done.stdout, "", answer)   # the program did not run
            self.assertIn(message, done.stderr, answer)

    def test_a_malformed_env_fails_closed_naming_it(self):
        gate = self.stub([(200, {"run": 3})])
        for env, message in ((pod_env(FLEET_GATE_URL=gate.url, FLEET_RUN="three"), "FLEET_RUN: 'three'"),
                             (pod_env(FLEET_GATE_URL=gate.url, FLEET_RUN="\u0663"), "FLEET_RUN"),
                             (pod_env(FLEET_GATE_URL=gate.url, FLEET_RUN=""), "FLEET_RUN"),
                             (pod_env(FLEET_GATE_URL="127.0.0.1:%d/gate" % gate.port), "FLEET_GATE_URL"),
                             (pod_env(FLEET_GATE_URL=gate.url + "?run=1"), "FLEET_GATE_URL")):
            done = run_trainer(env)
            self.assertEqual(done.returncode, 1, env)
            self.assertIn(message, done.stderr)
        self.assertEqual(gate.queries, [])

    def test_it_asks_again_while_the_sidecar_is_busy_or_restarting(self):
        gate = self.stub([(503, "the sidecar is stopping\n"), (429, "4 requests wait at the gate already\n"),
                          (200, {"run": 3})])
        done = run_trainer(pod_env(FLEET_GATE_URL=gate.url))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads(done.stdout)["self"]["FLEET_GATE_PASSED"], "3")
        self.assertEqual(len(gate.queries), 3)

        # Nothing listens on its port yet: the hook says so, and passes once the sidecar serves.
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        late = self.stub([(200, {"run": 5})], sock=sock, start=False)
        trainer = subprocess.Popen([sys.executable, "-c", PROGRAM], env=pod_env(FLEET_GATE_URL=late.url),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        try:
            first = trainer.stderr.readline()
            self.assertIn("fleetjob gate: cannot ask the sidecar (no answer: ", first)
            self.assertEqual(late.queries, [])
            late.start()
            out, _ = trainer.communicate(timeout=60)
        finally:
            trainer.kill()
            trainer.wait()
        self.assertEqual(trainer.returncode, 0)
        self.assertEqual(json.loads(out)["self"]["FLEET_RUN"], "5")

    def test_the_env_files_load_after_the_gate_as_before(self):
        """Those of the run it passed into: a container restarted in place was made for run 3."""
        gate = self.stub([(200, {"run": 4})])
        with tempfile.TemporaryDirectory() as files:
            for name, content in (("fleet-run", "4"), ("trainers", "10.0.0.1:6170,10.0.0.2:6170")):
                with open(os.path.join(files, name), "w") as f:
                    f.write(content)
            done = run_trainer(pod_env(FLEET_GATE_URL=gate.url, FLEET_ENV_FILES="PADDLE_TRAINER_ENDPOINTS=trainers",
                                       FLEET_ENV_FILES_DIR=files, FLEET_ENV_FILES_RUN="3"))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads(done.stdout)["self"],
                         {"FLEET_RUN": "4", "FLEET_GATE_PASSED": "4",
                          "PADDLE_TRAINER_ENDPOINTS": "10.0.0.1:6170,10.0.0.2:6170"})


if __name__ == "__main__":
    unittest.main()
