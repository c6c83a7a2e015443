"""The Kueue stand-in (docs/design/kueue.md section 7): Kueue's six CRDs, the Workload rules
its CEL and validating webhook enforce, and an admission loop that plays Kueue's scheduler
for a job controller under test (the FleetJob operator in the external-framework role).

Switched on by POST /fake/v1/config {"kueue": true} (CRDs from $FLEET_KUEUE_CRDS) or
{"kueue": {"crds": DIR}}; that also validates kueue.x-k8s.io objects against their schemas
(schemas.py). The loop runs serially on every change of a Workload, ClusterQueue, LocalQueue
or ResourceFlavor, in a thread of its own:

  * a pending Workload (active, not Finished, QuotaReserved not True) resolves spec.queueName
    to its LocalQueue and ClusterQueue, and is tried in order of priority, then creation;
  * each pod set's requests (containers summed, at least each init container, times count)
    get the first flavor of each resourceGroup that fits: node labels that agree with the
    template's nodeSelector, taints tolerated, usage + request <= nominalQuota (no cohorts);
  * a pod set with minCount is tried at smaller counts down to it, the largest first;
  * withinClusterQueue LowerPriority preemption evicts the shortest prefix of the lower
    priority workloads (lowest first, then most recently admitted) that makes room, and the
    preemptor waits (WaitingForPreemptedWorkloads) until their QuotaReserved turns False,
    which the job controller writes: the stand-in never releases quota itself;
  * spec.active=false evicts with reason Deactivated; Finished or inactive workloads hold no
    quota;
  * a flavor with a Topology places the pod set on nodes and the stand-in ungates its pods
    by rank, as Kueue's TAS does (kueue_tas.py).

Conditions, reasons and messages are Kueue's (v0.19, UnadmittedWorkloadsObservability off
for the pending reason). Not modelled: cohorts and borrowing, admission checks, fair
sharing, StrictFIFO, requeue backoff. Preemption simulates quota only, not topology."""

import copy
import fractions
import itertools
import os
import re
import sys
import threading
import uuid

from .errors import ApiError, cause, invalid_value, required
from . import kueue_tas as tas
from .kubelet import tolerates
from .quantity import format_quantity, parse
from .schemas import RULES, require
from .util import rfc3339


GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
CRD_FILES = ("resourceflavors", "workloadpriorityclasses", "topologies", "clusterqueues", "localqueues",
             "workloads")
WORKLOADS = GROUP + "/workloads"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
RE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)\Z")
ZERO = fractions.Fraction(0)


# ---- conditions -------------------------------------------------------------------------
def condition(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == ctype:
            return c
    return None


def is_true(obj, ctype):
    c = condition(obj, ctype)
    return c is not None and c.get("status") == "True"


def set_condition(obj, ctype, status, reason, message):
    """metav1 SetStatusCondition: the transition time moves only when the status does."""
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    gen = obj["metadata"].get("generation", 1)
    new = {"type": ctype, "status": status, "reason": reason, "message": message[:32768],
           "observedGeneration": gen, "lastTransitionTime": rfc3339()}
    for c in conds:
        if c.get("type") == ctype:
            if c.get("status") == status:
                new["lastTransitionTime"] = c.get("lastTransitionTime", new["lastTransitionTime"])
            c.clear()
            c.update(new)
            return
    conds.append(new)


def reset_condition(obj, ctype, reason):
    """Kueue's resetActiveCondition: a True condition becomes False, "Previously: ..."."""
    c = condition(obj, ctype)
    if c is not None and c.get("status") == "True":
        set_condition(obj, ctype, "False", reason, "Previously: " + c.get("message", ""))


# ---- the Workload rules: the CRD's CEL and Kueue's validating webhook ---------------------
def workload_causes(new, old):
    spec, status = new.get("spec") or {}, new.get("status") or {}
    causes = []
    if "priorityClassRef" in spec and "priority" not in spec:
        causes.append(invalid_value("spec.priority", None, "priority should not be nil when priorityClassRef is set"))
    pod_sets = [p for p in spec.get("podSets") or [] if isinstance(p, dict)]
    with_min = [i for i, p in enumerate(pod_sets) if "minCount" in p]
    if len(with_min) > 1:
        causes.append(invalid_value("spec.podSets", len(with_min), "at most one podSet can use minCount"))
    for i in with_min:
        if pod_sets[i]["minCount"] > pod_sets[i].get("count", 1):
            causes.append(invalid_value("spec.podSets[%d].minCount" % i, pod_sets[i]["minCount"],
                                        "minCount should be positive and less or equal to count"))
    for i, c in enumerate(status.get("conditions") or []):
        if not RE_TIME.match(str(c.get("lastTransitionTime", ""))):
            causes.append(invalid_value("status.conditions[%d].lastTransitionTime" % i, c.get("lastTransitionTime"),
                                        "must be an RFC 3339 date-time"))
    admission = status.get("admission")
    if is_true(new, "QuotaReserved"):
        if admission is None and not (old is not None and is_true(old, "QuotaReserved") and
                                      not (old.get("status") or {}).get("admission")):
            causes.append(required("status.admission", "must be set while the QuotaReserved condition is true"))
        if admission is not None and len(admission.get("podSetAssignments") or []) != len(pod_sets):
            causes.append(invalid_value("status.admission.podSetAssignments", len(admission.get("podSetAssignments")
                                                                                  or []),
                                        "podSetAssignments must have the same number of podSets as the spec"))
    if old is None:
        return causes
    old_admission = (old.get("status") or {}).get("admission")
    if is_true(old, "QuotaReserved") and spec.get("podSets") != (old.get("spec") or {}).get("podSets"):
        causes.append(cause("FieldValueInvalid", "spec.podSets", "Invalid value: \"array\": field is immutable"))
    if admission is not None and old_admission is not None and admission != old_admission:
        causes.append(cause("FieldValueInvalid", "status.admission", "Invalid value: \"object\": field is immutable"))
    if is_true(old, "QuotaReserved") and is_true(new, "QuotaReserved"):
        if spec.get("queueName") != (old.get("spec") or {}).get("queueName"):
            causes.append(invalid_value("spec.queueName", spec.get("queueName"),
                                        "queueName is immutable while workload quota reserved"))
        causes += _reclaimable_pods_causes(status.get("reclaimablePods") or [],
                                           (old.get("status") or {}).get("reclaimablePods") or [])
    return causes


def _reclaimable_pods_causes(new, old):
    """While quota stays reserved, a pod set's reclaimable count may not go down or away."""
    before = {r.get("name"): r.get("count", 0) for r in old}
    after = {r.get("name"): r.get("count", 0) for r in new}
    causes = []
    for name, count in sorted(before.items()):
        if name not in after:
            causes.append(required("status.reclaimablePods[%s]" % name, "cannot be removed"))
        elif after[name] < count:
            causes.append(invalid_value("status.reclaimablePods[%s].count" % name, after[name],
                                        "cannot be less than %d" % count))
    return causes


RULES[WORKLOADS] = workload_causes


# ---- what a pod set asks for ---------------------------------------------------------------
def _container_requests(c):
    res = (c.get("resources") or {}) if isinstance(c, dict) else {}
    out = dict(res.get("limits") or {})     # Kueue's webhook: missing requests default to limits
    out.update(res.get("requests") or {})
    return out


def pod_requests(spec):
    """One pod's requests: containers and sidecars summed, at least each init container, plus
    the overhead -> {resource: (Fraction, binary)}."""
    total, binary = {}, {}

    def add(into, reqs):
        for r, q in reqs.items():
            v, b = parse(q)
            into[r] = into.get(r, ZERO) + v
            binary[r] = binary.get(r, False) or b
    inits = [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    for c in (spec.get("containers") or []) + [c for c in inits if c.get("restartPolicy") == "Always"]:
        add(total, _container_requests(c))
    for c in inits:
        if c.get("restartPolicy") != "Always":
            one = {}
            add(one, _container_requests(c))
            for r, v in one.items():
                total[r] = max(total.get(r, ZERO), v)
    add(total, spec.get("overhead") or {})
    return {r: (v, binary[r]) for r, v in total.items() if v}


class PodSet:
    def __init__(self, ps):
        self.name = ps.get("name", "main")
        self.count = ps.get("count", 1)
        self.min_count = ps.get("minCount", self.count)
        self.spec = (ps.get("template") or {}).get("spec") or {}
        self.per_pod = pod_requests(self.spec)
        self.topology_request = ps.get("topologyRequest") or {}

    def total(self, count, count_pods):
        out = {r: (v * count, b) for r, (v, b) in self.per_pod.items()}
        if count_pods:
            out["pods"] = (fractions.Fraction(count), False)
        return out


def taint_string(t):
    kv = t.get("key", "") + ("=" + t["value"] if t.get("value") else "")
    return kv + ":" + t.get("effect", "")


def flavor_mismatch(flavor, name, pod_spec):
    """Why the flavor cannot take the pod set (Kueue's message), or None."""
    fspec = flavor.get("spec") or {}
    tolerations = (pod_spec.get("tolerations") or []) + (fspec.get("tolerations") or [])
    for taint in fspec.get("nodeTaints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return "untolerated taint %s in flavor %s" % (taint_string(taint), name)
    labels, selector = fspec.get("nodeLabels") or {}, pod_spec.get("nodeSelector") or {}
    if any(k in labels and labels[k] != v for k, v in selector.items()):
        return "flavor %s doesn't match node affinity" % name
    return None


_PARSED = {}   # (path, mtime) -> the CRD: the Workload CRD is 19,000 lines of YAML, read once a process


def load_crd(path):
    try:
        key = (path, os.stat(path).st_mtime)
    except OSError as e:
        raise ApiError.bad_request("kueue: cannot read %s: %s" % (path, e.strerror))
    if key not in _PARSED:
        import yaml   # only the Kueue stand-in reads YAML (python3-yaml, with python3-kubernetes)
        with open(path) as f:
            _PARSED[key] = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return copy.deepcopy(_PARSED[key])


# ---- the stand-in -----------------------------------------------------------------------------
class Kueue:
    def __init__(self, server):
        self.server, self.store = server, server.store
        self.enabled = False
        self.cond = threading.Condition()
        self.dirty = self.busy = self.stopped = False
        self.thread = None
        self.created = {}        # workload uid -> resourceVersion of its creation (FIFO within a second)
        self.reserved_at = {}    # workload uid -> sequence number of its latest quota reservation
        self.seq = itertools.count(1)
        self.tas_used = {}       # during a pass: node -> {resource: what admitted TAS pod sets take}

    # ---- lifecycle and the control API ------------------------------------------------------
    def enable(self, crds_dir=None):
        crds_dir = crds_dir or os.environ.get("FLEET_KUEUE_CRDS")
        if not crds_dir or not os.path.isdir(crds_dir):
            raise ApiError.bad_request("kueue: no CRD directory (give {\"kueue\": {\"crds\": DIR}} or set "
                                       "FLEET_KUEUE_CRDS); got %r" % (crds_dir,))
        require("yaml", "jsonschema")
        st = self.store
        crd_rt = st.registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        for plural in CRD_FILES:
            crd = load_crd(os.path.join(crds_dir, "%s_%s.yaml" % (GROUP, plural)))
            with st.lock:
                if st._find(crd_rt, None, crd["metadata"]["name"]) is None:
                    st.create(crd_rt, None, crd)
        with st.lock:
            st.schemas.validate_groups.add(GROUP)
            self.enabled = True
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name="fake-kueue", daemon=True)
            self.thread.start()
        self.poke()

    def disable(self):
        self.enabled = False

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    def observe(self, etype, obj):
        """Called by the store, under its lock, for every commit of a kueue.x-k8s.io object
        and of a pod."""
        kind = obj.get("kind")
        if kind == "Pod" and not (etype == "ADDED" and any(
                g.get("name") == tas.TOPOLOGY_GATE for g in obj["spec"].get("schedulingGates") or [])):
            return
        if etype == "ADDED" and kind == "Workload":
            self.created[obj["metadata"]["uid"]] = int(obj["metadata"]["resourceVersion"])
        if self.enabled:
            self.poke()

    def poke(self):
        with self.cond:
            self.dirty = True
            self.cond.notify_all()

    def settle(self, timeout=10.0):
        """Waits until the loop has seen every change so far; -> whether it has."""
        with self.cond:
            return self.cond.wait_for(lambda: self.stopped or not (self.dirty or self.busy), timeout)

    def state(self):
        return {"enabled": self.enabled, "settled": self.settle(), "crds": list(CRD_FILES)}

    def _loop(self):
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.dirty or self.stopped)
                if self.stopped:
                    return
                self.dirty, self.busy = False, True
            try:
                with self.store.lock:
                    if self.enabled:
                        self.reconcile()
            except Exception as e:   # keep the loop alive whatever a test does
                sys.stderr.write("fake kueue: %r\n" % (e,))
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()

    def evict(self, ns, name, reason, message=None):
        """The control API's eviction of an admitted workload (PodsReadyTimeout, ...)."""
        if not isinstance(reason, str) or not re.match(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?\Z", reason):
            raise ApiError.bad_request("reason must be a CamelCase condition reason")
        with self.store.lock:
            rt = self.store.registry.storage(WORKLOADS)
            wl = self.store._find(rt, ns, name) if rt else None
            if wl is None:
                raise ApiError(404, "NotFound", 'workloads.%s "%s" not found' % (GROUP, name))
            if not is_true(wl, "QuotaReserved"):
                raise ApiError(409, "Conflict", "workload %s/%s holds no quota to evict" % (ns, name))
            return self._write(wl, lambda w: set_condition(w, "Evicted", "True", reason,
                                                            message or "Evicted by the test: " + reason))

    # ---- one pass ----------------------------------------------------------------------------
    def _objects(self, plural):
        return self.store.objects[GROUP + "/" + plural]

    def reconcile(self):
        if self.store.registry.storage(WORKLOADS) is None:
            return
        workloads = sorted(self._objects("workloads").values(),
                           key=lambda w: (-int((w.get("spec") or {}).get("priority") or 0),
                                          w["metadata"].get("creationTimestamp", ""),
                                          self.created.get(w["metadata"]["uid"], 0), w["metadata"]["name"]))
        for wl in workloads:
            self._deactivate_or_reactivate(wl)
        workloads = [self.store._find(self.store.registry.storage(WORKLOADS), w["metadata"]["namespace"],
                                      w["metadata"]["name"]) for w in workloads]
        usage, self.tas_used = {}, {}
        for wl in workloads:
            if wl is not None and self._holds_quota(wl):
                cq = usage.setdefault(wl["status"]["admission"].get("clusterQueue"), {})
                for fr, v in self._usage_of(wl).items():
                    cq[fr] = cq.get(fr, ZERO) + v
                self._add_tas_usage(wl["spec"].get("podSets") or [], wl["status"]["admission"])
        for wl in workloads:
            if wl is not None and self._pending(wl):
                self._schedule(wl, workloads, usage)
        self._ungate()

    def _add_tas_usage(self, pod_sets, admission):
        by_name = {ps.get("name", "main"): ps for ps in pod_sets}
        for psa in admission.get("podSetAssignments") or []:
            if psa.get("topologyAssignment") and psa.get("name") in by_name:
                tas.usage_by_node(psa["topologyAssignment"], PodSet(by_name[psa["name"]]).per_pod, self.tas_used)

    def _ungate(self):
        """Kueue's TopologyUngater for the gated pods of admitted TAS workloads."""
        pods_rt = self.store.registry.get("", "v1", "pods")
        for (ns, wl_name, ps_name), pods in sorted(tas.gated_pods(self.store).items()):
            wl = self._objects("workloads").get((ns, wl_name))
            if wl is None or not is_true(wl, "Admitted"):
                continue
            psa = next((a for a in wl["status"]["admission"].get("podSetAssignments") or []
                        if a.get("name") == ps_name), {})
            spec_ps = next((p for p in wl["spec"].get("podSets") or [] if p.get("name") == ps_name), {})
            if not psa.get("topologyAssignment"):
                continue
            index_label = (spec_ps.get("topologyRequest") or {}).get("podIndexLabel")
            for pod, selector in tas.domains_for(pods, psa["topologyAssignment"], index_label):
                new = self.store.internal_update(pods_rt, pod, lambda p, sel=selector: tas.ungate(p, sel))
                self.server.kubelet.pod_updated(pod, new)

    @staticmethod
    def _active(wl):
        return (wl.get("spec") or {}).get("active", True) is not False and not is_true(wl, "Finished")

    def _holds_quota(self, wl):
        return self._active(wl) and is_true(wl, "QuotaReserved") and bool((wl.get("status") or {}).get("admission"))

    def _pending(self, wl):
        return self._active(wl) and not is_true(wl, "QuotaReserved") and not wl["metadata"].get("deletionTimestamp")

    @staticmethod
    def _usage_of(wl):
        out = {}
        for psa in wl["status"]["admission"].get("podSetAssignments") or []:
            for r, q in (psa.get("resourceUsage") or {}).items():
                fr = ((psa.get("flavors") or {}).get(r), r)
                out[fr] = out.get(fr, ZERO) + parse(q)[0]
        return out

    def _deactivate_or_reactivate(self, wl):
        spec = wl.get("spec") or {}
        if is_true(wl, "Finished"):
            return
        if spec.get("active", True) is False:
            if not is_true(wl, "Evicted"):
                self._write(wl, lambda w: set_condition(w, "Evicted", "True", "Deactivated",
                                                        "The workload is deactivated"))
            return
        req = condition(wl, "Requeued")
        if req is not None and req.get("status") == "False" and req.get("reason") == "Deactivated":
            self._write(wl, lambda w: set_condition(w, "Requeued", "True", "Reactivated",
                                                    "The workload was reactivated"))

    def _write(self, wl, mutate):
        """A status write of the stand-in, held to the same rules as a client's."""
        st = self.store
        rt = st.registry.storage(WORKLOADS)
        new = copy.deepcopy(wl)
        mutate(new)
        if new == wl:
            return wl
        causes = st.schemas.check(st, rt, new, wl)
        if causes:
            sys.stderr.write("fake kueue: refused its own write of %s: %r\n" % (wl["metadata"]["name"], causes))
            return wl
        return st._commit(rt, "MODIFIED", new, wl)

    # ---- admission -------------------------------------------------------------------------
    def _schedule(self, wl, workloads, usage):
        ns, spec = wl["metadata"]["namespace"], wl.get("spec") or {}
        lq = self._objects("localqueues").get((ns, spec.get("queueName", "")))
        if lq is None or lq["metadata"].get("deletionTimestamp"):
            return self._set_pending(wl, "Misconfigured", "LocalQueue %s is terminating or missing"
                                     % spec.get("queueName", ""), None)
        cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
        cq = self._objects("clusterqueues").get(("", cq_name))
        if cq is None or cq["metadata"].get("deletionTimestamp"):
            return self._set_pending(wl, "Misconfigured", "ClusterQueue %s is terminating or missing" % cq_name, None)
        pod_sets = [PodSet(ps) for ps in spec.get("podSets") or []]
        cq_usage = usage.setdefault(cq_name, {})
        counts = [ps.count for ps in pod_sets]
        outcome = self._try(wl, cq, pod_sets, counts, cq_usage, workloads)
        message = outcome[2]
        shrinkable = [i for i, ps in enumerate(pod_sets) if ps.min_count < ps.count]
        if outcome[0] == "nofit" and shrinkable:
            i = shrinkable[0]
            for n in range(pod_sets[i].count - 1, pod_sets[i].min_count - 1, -1):
                tried = self._try(wl, cq, pod_sets, counts[:i] + [n] + counts[i + 1:], cq_usage, workloads)
                if tried[0] != "nofit":
                    outcome = tried
                    break
        kind, assignments = outcome[0], outcome[1]
        if kind == "fit":
            self._admit(wl, cq_name, assignments)
            self._add_tas_usage(spec.get("podSets") or [], {"podSetAssignments": assignments})
            for fr, v in self._usage_of({"status": {"admission": {"podSetAssignments": assignments}}}).items():
                cq_usage[fr] = cq_usage.get(fr, ZERO) + v
        elif kind == "preempt":
            victims = outcome[3]
            for v in victims:
                self._preempt(v, wl, cq_name)
            self._set_pending(wl, "WaitingForPreemptedWorkloads", "%s. Pending the preemption of %d workload(s)"
                              % (message, len(victims)), pod_sets)
        else:
            self._set_pending(wl, "Pending", message, pod_sets)

    def _try(self, wl, cq, pod_sets, counts, cq_usage, workloads):
        """-> ("fit", assignments, ""), ("preempt", assignments, message, victims) or
        ("nofit", None, message)."""
        assignments, message = self._assign(cq, pod_sets, counts, cq_usage)
        if assignments is not None:
            return "fit", assignments, ""
        if ((cq.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue") != "LowerPriority":
            return "nofit", None, message
        prio = int((wl.get("spec") or {}).get("priority") or 0)
        cq_name = cq["metadata"]["name"]
        candidates = [w for w in workloads if w is not None and self._holds_quota(w) and
                      w["status"]["admission"].get("clusterQueue") == cq_name and
                      int((w.get("spec") or {}).get("priority") or 0) < prio]
        candidates.sort(key=lambda w: (not is_true(w, "Evicted"), int((w.get("spec") or {}).get("priority") or 0),
                                       -self.reserved_at.get(w["metadata"]["uid"], 0),
                                       w["metadata"]["uid"]))
        remaining = dict(cq_usage)
        for k, victim in enumerate(candidates, 1):
            for fr, v in self._usage_of(victim).items():
                remaining[fr] = remaining.get(fr, ZERO) - v
            if self._assign(cq, pod_sets, counts, remaining)[0] is not None:
                return "preempt", None, message, candidates[:k]
        return "nofit", None, message

    def _assign(self, cq, pod_sets, counts, cq_usage):
        """Flavors for each pod set, in order -> (podSetAssignments, "") or (None, Kueue's message)."""
        groups = (cq.get("spec") or {}).get("resourceGroups") or []
        count_pods = any("pods" in (g.get("coveredResources") or []) for g in groups)
        own, assignments, messages = {}, [], []
        tas_used = {node: dict(used) for node, used in self.tas_used.items()}
        for ps, count in zip(pod_sets, counts):
            total = ps.total(count, count_pods)
            flavors, reasons = {}, []
            for r in sorted(total):
                if r in flavors:
                    continue
                group = next((g for g in groups if r in (g.get("coveredResources") or [])), None)
                if group is None:
                    reasons = ["resource %s unavailable in ClusterQueue" % r]
                    break
                chosen, why = self._flavor_for(group, ps, total, own, cq_usage)
                if chosen is None:
                    reasons = why
                    break
                for gr in group.get("coveredResources") or []:
                    if gr in total:
                        flavors[gr] = chosen
            topology = None if reasons else self._place(ps, count, flavors, tas_used, reasons)
            if reasons:
                messages.append("couldn't assign flavors to pod set %s: %s" % (ps.name, ", ".join(sorted(reasons))))
                continue
            for r, (v, _b) in total.items():
                own[(flavors[r], r)] = own.get((flavors[r], r), ZERO) + v
            assignments.append({"name": ps.name, "flavors": {r: flavors[r] for r in sorted(flavors)},
                                "resourceUsage": {r: format_quantity(v, b) for r, (v, b) in sorted(total.items())},
                                "count": count})
            if topology is not None:
                assignments[-1]["topologyAssignment"] = topology
                tas.usage_by_node(topology, ps.per_pod, tas_used)
        if messages:
            return None, "; ".join(messages)
        return assignments, ""

    def _place(self, ps, count, flavors, tas_used, reasons):
        """The topologyAssignment of a pod set whose flavor has a Topology (None for one
        without); why not, appended to reasons."""
        for name in sorted(set(flavors.values())):
            flavor = self._objects("resourceflavors").get(("", name)) or {}
            levels = tas.topology_levels(self.store, flavor)
            if levels is not None:
                placed, why = tas.place(self.store, flavor, name, levels, ps, count, tas_used)
                if why:
                    reasons.append(why)
                return placed
        return None

    def _flavor_for(self, group, ps, total, own, cq_usage):
        """The first of the group's flavors that takes the pod set's resources of this group ->
        (name, None) or (None, the reasons each flavor gave)."""
        reasons = []
        covered = [r for r in group.get("coveredResources") or [] if r in total]
        for fq in group.get("flavors") or []:
            name = fq.get("name", "")
            flavor = self._objects("resourceflavors").get(("", name))
            if flavor is None:
                reasons.append("flavor %s not found" % name)
                continue
            mismatch = flavor_mismatch(flavor, name, ps.spec)
            if mismatch:
                reasons.append(mismatch)
                continue
            nominal = {q.get("name"): parse(q.get("nominalQuota", 0))[0] for q in fq.get("resources") or []}
            fits = True
            for r in covered:
                v, b = total[r]
                mine = own.get((name, r), ZERO)
                used = cq_usage.get((name, r), ZERO) + mine
                cap = nominal.get(r, ZERO)
                if mine + v > cap:
                    reasons.append("insufficient quota for %s in flavor %s, previously considered podsets requests "
                                   "(%s) + current podset request (%s) > maximum capacity (%s)"
                                   % (r, name, format_quantity(mine, b), format_quantity(v, b),
                                      format_quantity(cap, b)))
                    fits = False
                elif used + v > cap:
                    reasons.append("insufficient unused quota for %s in flavor %s, %s more needed"
                                   % (r, name, format_quantity(used + v - cap, b)))
                    fits = False
            if fits:
                return name, None
        return None, reasons

    def _admit(self, wl, cq_name, assignments):
        def admit(w):
            st = w.setdefault("status", {})
            st["admission"] = {"clusterQueue": cq_name, "podSetAssignments": assignments}
            st.pop("resourceRequests", None)
            set_condition(w, "QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue %s" % cq_name)
            reset_condition(w, "Evicted", "QuotaReserved")
            reset_condition(w, "Preempted", "QuotaReserved")
            set_condition(w, "Admitted", "True", "Admitted", "The workload is admitted")
        self.reserved_at[wl["metadata"]["uid"]] = next(self.seq)
        self._write(wl, admit)

    def _set_pending(self, wl, reason, message, pod_sets):
        def pending(w):
            set_condition(w, "QuotaReserved", "False", reason, message)
            if pod_sets is not None:
                w["status"]["resourceRequests"] = [
                    {"name": ps.name, "resources": {r: format_quantity(v, b)
                                                    for r, (v, b) in sorted(ps.total(ps.count, False).items())}}
                    for ps in pod_sets]
        self._write(wl, pending)

    def _preempt(self, victim, preemptor, cq_name):
        """Kueue's IssuePreemptions for one target: Evicted and Preempted, and an event."""
        if is_true(victim, "Evicted"):
            return
        message = ("Preempted to accommodate a workload (UID: %s, JobUID: %s) due to prioritization in the "
                   "ClusterQueue; preemptor path: /%s; preemptee path: /%s"
                   % (preemptor["metadata"]["uid"], (preemptor["metadata"].get("labels") or {}).get(
                       JOB_UID_LABEL, "UNKNOWN"), cq_name, cq_name))

        def preempt(w):
            set_condition(w, "Evicted", "True", "Preempted", message)
            set_condition(w, "Preempted", "True", "InClusterQueue", message)
        victim = self._write(victim, preempt)
        self._event(victim, "Preempted", message)

    def _event(self, wl, reason, message):
        st, meta, now = self.store, wl["metadata"], rfc3339()
        st.create(st.registry.get("", "v1", "events"), meta["namespace"], {
            "metadata": {"name": "%s.%s" % (meta["name"], uuid.uuid4().hex[:16]), "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": wl.get("apiVersion", GROUP + "/" + VERSION), "kind": "Workload",
                               "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
                               "resourceVersion": meta["resourceVersion"]},
            "reason": reason, "message": message, "type": "Normal", "count": 1,
            "source": {"component": "kueue-admission"}, "reportingComponent": "kueue-admission",
            "firstTimestamp": now, "lastTimestamp": now})
