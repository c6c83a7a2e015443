"""docs/reference.md is what scripts/gen-reference.py makes of crds/fleetjob.yaml (the reference
cannot drift from the schema), and it documents every field of the schema."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "gen-reference.py")


def fields(schema, path):
    for name, prop in schema.get("properties", {}).items():
        p = path + "." + name
        yield p
        yield from fields(prop, p)
        if "items" in prop:
            yield from fields(prop["items"], p + "[]")


class TestReference(unittest.TestCase):
    def test_reference_is_up_to_date(self):
        out = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_every_field_is_documented(self):
        with open(os.path.join(ROOT, "crds", "fleetjob.yaml")) as f:
            schema = yaml.safe_load(f)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        with open(os.path.join(ROOT, "docs", "reference.md")) as f:
            reference = f.read()
        for top in ("spec", "status"):
            for path in fields(schema["properties"][top], top):
                self.assertIn("| `%s` |" % path, reference)

    def test_check_fails_on_a_stale_reference(self):
        # The script in a scratch copy of the tree, with a CRD whose description changed.
        with tempfile.TemporaryDirectory() as root:
            for d in ("scripts", "crds", "docs"):
                os.mkdir(os.path.join(root, d))
            shutil.copy(SCRIPT, os.path.join(root, "scripts"))
            shutil.copy(os.path.join(ROOT, "docs", "reference.md"), os.path.join(root, "docs"))
            with open(os.path.join(ROOT, "crds", "fleetjob.yaml")) as f:
                crd = f.read()
            self.assertIn("description: What to run.", crd)
            with open(os.path.join(root, "crds", "fleetjob.yaml"), "w") as f:
                f.write(crd.replace("description: What to run.", "description: What to train."))
            script = os.path.join(root, "scripts", "gen-reference.py")
            out = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 1)
            self.assertIn("docs/reference.md is out of date: run scripts/gen-reference.py", out.stderr)
            self.assertIn("+What to train.", out.stderr)
            subprocess.run([sys.executable, script], check=True, timeout=30)
            out = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)

if __name__ == "__main__":
    unittest.main()
