#!/usr/bin/python3
"""Recovery after a lost worker pod, in real containers (issue 18, FleetJob side).

The same collective job (3 workers, fleetrun running examples/elastic/train.py, paced) twice,
in one cluster (tests/containers: the podman kubelet, the operator from its image, the chart's
etcd in a pod), and worker 1's pod deleted mid-run (as an eviction does):
  - elastic (spec.elastic 2..4): the two survivors re-rendezvous without it, then all three again
    once the operator's replacement pod joins; the same run throughout;
  - not elastic, restartPolicy OnFailure: the operator restarts the whole job (a new run, three
    new pods).
Measured from the delete request to the moment the trainers of the new membership have all
started and passed their collective rendezvous (their "rank R/N" line, by the container log's own
timestamp); the median of --repeat rounds, the two jobs taking turns.

Run as root after scripts/build.sh and scripts/images.sh (as the container tests):
  FLEET_BUILD_DIR=build /usr/bin/python3 bench/elastic_recovery_containers.py [--repeat N]
"""

import argparse
import datetime
import json
import os
import re
import statistics
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "containers"))
sys.dont_write_bytecode = True
from cluster import wait_for  # noqa: E402
from test_elastic import ElasticInContainersTest, elastic_job  # noqa: E402

RANK_LINE = re.compile(r"^(\S+) rank \d+/(\d+), backend", re.M)
NAMES = ["worker-0", "worker-1", "worker-2"]
ROUNDS = 3


def epoch(rfc3339nano):
    """Seconds since the epoch of a log timestamp (nanoseconds cut to microseconds)."""
    date, _, frac = rfc3339nano.rstrip("Z").partition(".")
    t = datetime.datetime.strptime(date, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + float("0." + (frac or "0"))


class RecoveryBenchmark(ElasticInContainersTest):
    def started(self, pod, size, after):
        """When the trainer in `pod` first passed a rendezvous of `size` ranks after `after`; None if not yet."""
        log = self.cluster.kubectl("logs", "--timestamps", pod, "-c", "trainer", check=False)
        times = [epoch(ts) for ts, n in RANK_LINE.findall(log) if int(n) == size and epoch(ts) > after]
        return min(times) if times else None

    def all_started(self, job, pods, size, after, timeout=120):
        def check():
            times = [self.started("%s-%s" % (job, p), size, after) for p in pods]
            return max(times) if all(times) else None
        try:
            return wait_for("%s: %s past a rendezvous of %d" % (job, pods, size), check, timeout=timeout,
                            poll=0.5) - after
        except AssertionError:
            print(json.dumps((self.job(job) or {}).get("status"), indent=1))
            print(self.cluster.kubectl("get", "pods", "-o", "wide", check=False))
            for p in pods:
                print("--- %s-%s:\n%s" % (job, p, self.cluster.kubectl("logs", "%s-%s" % (job, p), "-c", "trainer",
                                                                         check=False)[-3000:]))
            raise

    def elastic_round(self, i):
        job = "elastic-%d" % i
        self.cluster.apply(elastic_job(job, 3, self.etcd, steps=10 ** 8))
        self.all_started(job, NAMES, 3, 0)
        t0 = time.time()
        self.cluster.kubectl("delete", "pod", job + "-worker-1", "--wait=false")
        survivors = self.all_started(job, ["worker-0", "worker-2"], 2, t0)
        everyone = self.all_started(job, NAMES, 3, t0)
        self.cluster.kubectl("delete", "fleetjob", job, "--wait=true", timeout=120)
        return survivors, everyone

    def restart_round(self, i):
        job = "restart-%d" % i
        # OnFailure: the survivors' trainers fail as their peer goes (exit 1), and the job restarts.
        self.cluster.apply(elastic_job(job, 3, None, steps=10 ** 8, restart_policy="OnFailure"))
        self.all_started(job, NAMES, 3, 0)
        run = self.job(job)["status"]["run"]
        t0 = time.time()
        self.cluster.kubectl("delete", "pod", job + "-worker-1", "--wait=false")
        everyone = self.all_started(job, NAMES, 3, t0)
        self.assertGreater(self.job(job)["status"]["run"], run, "a whole-job restart: a new run")
        self.cluster.kubectl("delete", "fleetjob", job, "--wait=true", timeout=120)
        return everyone

    def test_recovery(self):
        elastic, restart = [], []
        for i in range(ROUNDS):
            elastic.append(self.elastic_round(i))
            restart.append(self.restart_round(i))
            print("round %d: elastic: survivors %.2f s, all three %.2f s; whole-job restart: %.2f s"
                  % (i + 1, elastic[-1][0], elastic[-1][1], restart[-1]), flush=True)
        survivors = statistics.median(e[0] for e in elastic)
        everyone = statistics.median(e[1] for e in elastic)
        whole = statistics.median(restart)
        print("\nworker pod deleted -> trainers of the new membership past their rendezvous (median of %d):" % ROUNDS)
        print("  elastic, the 2 survivors:               %6.2f s" % survivors)
        print("  elastic, all 3 (the replacement joined): %6.2f s" % everyone)
        print("  whole-job restart (not elastic), all 3:  %6.2f s" % whole)
        print("  ratio whole-job restart / elastic: %.1fx (survivors), %.1fx (all 3)"
              % (whole / survivors, whole / everyone))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=ROUNDS, help="rounds of each job (default %d)" % ROUNDS)
    ROUNDS = parser.parse_args().repeat
    unittest.main(argv=[sys.argv[0], "-v", "RecoveryBenchmark.test_recovery"])
