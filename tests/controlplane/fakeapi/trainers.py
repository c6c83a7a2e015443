"""fleet-sidecar --in-place as the fake kubelet plays it (docs/design/fast-failures.md §5): for a
pod whose main container has FLEET_GATE_URL, its trainer instance's gate, binding and liveness
probe, reported as the pod condition fleet.paddlepaddle.org/Trainer in the format of
api/include/fleet/api/in_place.h.

An instance (a start of the trainer container) waits at the gate for a run >= its floor: the pod's
run label when it started (its FLEET_RUN), or, after an earlier instance, that one's run + 1. It
passes into the endpoints ConfigMap's run once no barrier holds it, and is bound to that run. When
the ConfigMap's run passes a running instance's, the liveness probe fails: the kubelet kills the
container (137) and restarts it per the pod's restartPolicy. Every step happens at once (no probe
period, no back-off), so that what a benchmark measures is the operator."""

import collections

TRAINER_CONDITION = "fleet.paddlepaddle.org/Trainer"
BARRIER_ANNOTATION = "fleet.paddlepaddle.org/barrier"
RUN_KEY = "fleet.paddlepaddle.org/run"            # the pods' run label, the ConfigMap's run annotation
JOB_LABEL = "fleet.paddlepaddle.org/job-name"
GATE_URL_ENV = "FLEET_GATE_URL"
ENDPOINTS_SUFFIX = "-endpoints"

RUNNING, AT_GATE, EXITED = "Running", "AtGate", "Exited"
_DETAIL = {RUNNING: "the trainer runs", AT_GATE: "the trainer waits at the gate for this run or a later one",
           EXITED: "the trainer bound to this run ended"}


def _int(text):
    try:
        n = int(str(text).strip())
    except (TypeError, ValueError):
        return None
    return n if n >= 0 else None


def trainer_container(pod):
    """The name of the pod's first main container that waits at the sidecar's gate, or None."""
    for c in pod.get("spec", {}).get("containers") or []:
        if any(isinstance(e, dict) and e.get("name") == GATE_URL_ENV for e in c.get("env") or []):
            return c["name"]
    return None


class Trainer:
    """One pod's trainer: the current instance's state and run (its floor while at the gate), and
    the run the pod's last bound instance passed the gate into (None before any did)."""
    __slots__ = ("key", "state", "run", "bound", "alive")

    def __init__(self, key):
        self.key, self.state, self.run, self.bound, self.alive = key, AT_GATE, 0, None, False


class Trainers:
    """Every in-place pod's Trainer, by pod uid and by job. Called under the store's lock."""

    def __init__(self, kubelet):
        self.kubelet = kubelet
        self.by_uid = {}
        self.by_job = collections.defaultdict(set)    # (namespace, job) -> pod uids
        self.pending = set()                          # jobs whose ConfigMap change waits for the kubelet

    def started(self, pod):
        """The pod's trainer container (re)started (inside a mutation of `pod`): a new instance at
        the gate, which passes at once if its run is open."""
        meta = pod["metadata"]
        t = self.by_uid.get(meta["uid"])
        if t is None:
            t = self.by_uid[meta["uid"]] = Trainer((meta["namespace"], (meta.get("labels") or {}).get(JOB_LABEL, "")))
            self.by_job[t.key].add(meta["uid"])
        label = _int((meta.get("labels") or {}).get(RUN_KEY)) or 0
        t.state, t.run, t.alive = AT_GATE, label if t.bound is None else max(label, t.bound + 1), True
        self._pass_gate(t, self.runs(t.key)[1])
        self._write(pod, t)

    def ended(self, pod):
        """The trainer container ended and stays down: the bound instance has exited (an instance
        that ended at the gate leaves the report as it was)."""
        t = self.by_uid.get(pod["metadata"]["uid"])
        if t is None:
            return
        t.alive = False
        if t.state == RUNNING:
            t.state = EXITED
            self._write(pod, t)

    def forget(self, uid):
        t = self.by_uid.pop(uid, None)
        if t is not None:
            self.by_job[t.key].discard(uid)
            if not self.by_job[t.key]:
                del self.by_job[t.key]

    def configmap_changed(self, cm):
        """A ConfigMap was written: when it is the endpoints of a job with in-place pods, the
        kubelet syncs their trainers (once for changes that come before it gets to them)."""
        meta = cm["metadata"]
        if not meta["name"].endswith(ENDPOINTS_SUFFIX):
            return
        key = (meta.get("namespace", ""), meta["name"][:-len(ENDPOINTS_SUFFIX)])
        if key in self.by_job and key not in self.pending:
            self.pending.add(key)
            self.kubelet.later(0, lambda: self.sync(key))

    def runs(self, key):
        """The job's endpoints ConfigMap's run annotation and its open run (None while a barrier
        annotation holds that run, or without a ConfigMap or run)."""
        cms = self.kubelet.store.registry.get("", "v1", "configmaps")
        cm = self.kubelet.store._find(cms, key[0], key[1] + ENDPOINTS_SUFFIX)
        notes = (cm or {}).get("metadata", {}).get("annotations") or {}
        run = _int(notes.get(RUN_KEY))
        barrier = _int(notes.get(BARRIER_ANNOTATION))
        return run, (run if run is not None and barrier != run else None)

    def sync(self, key):
        """Applies the job's ConfigMap to its trainers: the liveness probe kills instances of an
        older run; instances at the gate pass into the open run."""
        self.pending.discard(key)
        run, open_run = self.runs(key)
        for uid in sorted(self.by_job.get(key, ())):
            t = self.by_uid.get(uid)
            if t is None or not t.alive:
                continue
            superseded = t.state == RUNNING and run is not None and t.run < run
            passes = t.state == AT_GATE and open_run is not None and open_run >= t.run
            if not (superseded or passes):
                continue
            _rt, pod = self.kubelet.store.by_uid(uid)
            if pod is None:
                continue
            if superseded:
                self.kubelet.liveness_kill(pod, trainer_container(pod))
            else:
                self.kubelet._update(pod, lambda p, t=t: (self._pass_gate(t, open_run), self._write(p, t)))

    @staticmethod
    def _pass_gate(t, open_run):
        if t.alive and t.state == AT_GATE and open_run is not None and open_run >= t.run:
            t.state, t.run, t.bound = RUNNING, open_run, open_run

    def _write(self, pod, t):
        self.kubelet._set_cond(pod, TRAINER_CONDITION, "True" if t.state == RUNNING else "False", t.state,
                               "run %d: %s" % (t.run, _DETAIL[t.state]))
