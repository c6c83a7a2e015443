"""Tests of fleet_checkpoint against a directory laid out as the sidecar lays it out. Run:
    python3 sdk/python/test_fleet_checkpoint.py
The sidecar's side (writing the request, reading done) is tested by tests/sidecar/checkpoint_test.cc."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_checkpoint  # noqa: E402


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.env = dict(os.environ)
        os.environ[fleet_checkpoint.ENV_DIR] = self.dir
        os.environ.pop(fleet_checkpoint.ENV_STEP, None)
        fleet_checkpoint._answered = None

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.env)
        self.tmp.cleanup()

    def ask(self, reason="preStop"):
        """A request as the sidecar writes it: through a rename."""
        temporary = os.path.join(self.dir, "request.tmp")
        with open(temporary, "w") as f:
            json.dump({"reason": reason, "deadline": "2026-11-29T01:00:30Z", "timeoutSeconds": 30}, f)
        os.replace(temporary, os.path.join(self.dir, "request"))

    def done(self):
        with open(os.path.join(self.dir, "done")) as f:
            return f.read()

    def test_a_request_is_seen_answered_once_and_a_new_one_seen_again(self):
        self.assertFalse(fleet_checkpoint.requested())
        self.ask()
        self.assertTrue(fleet_checkpoint.requested())
        self.assertEqual(fleet_checkpoint.request()["reason"], "preStop")
        fleet_checkpoint.saved(1200)
        self.assertEqual(self.done(), "1200\n")
        self.assertEqual([n for n in os.listdir(self.dir) if n.endswith(".tmp")], [])
        # The sidecar has not removed the request yet: answered, so not asked again.
        self.assertFalse(fleet_checkpoint.requested())
        self.ask("eviction")
        self.assertTrue(fleet_checkpoint.requested())

    def test_saved_refuses_what_is_not_a_step(self):
        for bad in (-1, 1.5, "12", True, 2 ** 53 + 1):
            with self.assertRaises(ValueError):
                fleet_checkpoint.saved(bad)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "done")))

    def test_outside_a_fleetjob_nothing_is_asked_or_written(self):
        del os.environ[fleet_checkpoint.ENV_DIR]
        self.assertFalse(fleet_checkpoint.requested())
        self.assertIsNone(fleet_checkpoint.request())
        fleet_checkpoint.saved(5)
        self.assertEqual(os.listdir(self.dir), [])

    def test_a_malformed_request_reads_as_none(self):
        with open(os.path.join(self.dir, "request"), "w") as f:
            f.write("{not json")
        self.assertTrue(fleet_checkpoint.requested())
        self.assertIsNone(fleet_checkpoint.request())

    def test_resume_step(self):
        self.assertIsNone(fleet_checkpoint.resume_step())
        for text, step in (("4200", 4200), (" 7\n", 7), ("0", 0), ("-3", None), ("x", None), ("", None),
                           (str(2 ** 53 + 1), None)):
            os.environ[fleet_checkpoint.ENV_STEP] = text
            self.assertEqual(fleet_checkpoint.resume_step(), step, text)


if __name__ == "__main__":
    unittest.main()
