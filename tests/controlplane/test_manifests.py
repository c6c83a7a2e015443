"""The project's own manifests against the test API server, through kubectl: the FleetJob CRD
(crds/fleetjob.yaml) and every example FleetJob (examples/k8s/*.yaml) apply, and `kubectl get fj`
lists them with the CRD's printer columns.

Run:  /usr/bin/python3 -m unittest -v test_manifests   (from this directory)
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import fake_apiserver  # noqa: E402
from test_fake_apiserver import KUBECONFIG_TEMPLATE  # noqa: E402

KUBECTL = shutil.which("kubectl")
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "k8s", "*.yaml")))


@unittest.skipUnless(KUBECTL, "kubectl not installed")
class TestManifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = fake_apiserver.FakeApiServer()
        cls.srv.start()
        cls.dir = tempfile.mkdtemp(prefix="fleet-manifests-")
        cls.kubeconfig = os.path.join(cls.dir, "config")
        with open(cls.kubeconfig, "w") as f:
            f.write(KUBECONFIG_TEMPLATE.format(server=cls.srv.url, extra="", token="unused"))

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.dir, True)

    def kubectl(self, *args):
        out = subprocess.run([KUBECTL, "--kubeconfig", self.kubeconfig, "--cache-dir", os.path.join(self.dir, "cache")]
                             + list(args), capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, "kubectl %s: %s%s" % (" ".join(args), out.stdout, out.stderr))
        return out.stdout

    def test_crd_and_every_example_apply(self):
        self.assertGreaterEqual(len(EXAMPLES), 3)
        self.kubectl("apply", "--validate=false", "-f", os.path.join(ROOT, "crds", "fleetjob.yaml"))
        for path in EXAMPLES:
            with self.subTest(example=os.path.basename(path)):
                self.assertIn("created", self.kubectl("apply", "--validate=false", "-f", path))
        listing = self.kubectl("get", "fj")
        header = listing.splitlines()[0].split()
        self.assertEqual(header, ["NAME", "MODE", "PHASE", "SERVERS", "WORKERS", "HETER", "RESTARTS", "STEP", "SPEED", "ETA", "AGE"])
        for name in ("ps-example", "resnet50", "heter-example"):
            self.assertIn(name, listing)


if __name__ == "__main__":
    unittest.main()
