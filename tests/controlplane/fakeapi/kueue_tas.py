"""Topology-aware scheduling in the Kueue stand-in (docs/design/kueue.md sections 4 and 7.5).

Placement, at admission: a pod set whose flavor names a Topology (spec.topologyName) is placed
on the Node objects that carry every level label and the flavor's nodeLabels, sorted by their
level values. Each node takes as many pods as its status.allocatable leaves room for (pods
included) after the TAS workloads already admitted. With topologyRequest.required (or
preferred) level L, the first domain of level L in that order that holds every pod is filled
node by node; preferred, unconstrained and implicit requests fall back to the whole cluster.
The result is status.admission's topologyAssignment: the levels (only kubernetes.io/hostname
when that is the lowest, as Kueue records it) and one slice of individual values and counts.

Ungating, as Kueue's TopologyUngater: a pod with the scheduling gate kueue.x-k8s.io/topology,
the annotation kueue.x-k8s.io/workload and the label kueue.x-k8s.io/podset, whose Workload is
admitted with a topologyAssignment, gets its domain's level labels in spec.nodeSelector and
loses the gate. Rank r (the pod's podIndexLabel value) takes the r-th slot of the domains in
order, so consecutive ranks share nodes; pods without a rank take the slots after the ranked
ones, by name. Not modelled: slices, pod set groups, BestFit/LeastFreeCapacity profiles."""

import fractions

from .quantity import parse


GROUP = "kueue.x-k8s.io"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
PODSET_LABEL = "kueue.x-k8s.io/podset"
HOSTNAME = "kubernetes.io/hostname"


def topology_levels(store, flavor):
    """The node labels of the flavor's Topology's levels; None for a flavor without one, []
    when it names a Topology that does not exist."""
    name = (flavor.get("spec") or {}).get("topologyName")
    if not name:
        return None
    topology = store.objects[GROUP + "/topologies"].get(("", name))
    if topology is None:
        return []
    return [level.get("nodeLabel", "") for level in (topology.get("spec") or {}).get("levels") or []]


def _capacity(node, per_pod, used):
    """How many more pods of per_pod ({resource: (Fraction, binary)}) the node holds."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    needs = dict((r, v) for r, (v, _b) in per_pod.items())
    needs["pods"] = needs.get("pods", fractions.Fraction(0)) + 1
    fits = None
    for r, v in needs.items():
        free = parse(allocatable.get(r, 0))[0] - used.get(r, 0)
        n = max(0, int(free // v))
        fits = n if fits is None else min(fits, n)
    return fits or 0


def expand(assignment):
    """A topologyAssignment -> one tuple of level values per pod slot, in order."""
    slots = []
    for piece in assignment.get("slices") or []:
        n = piece.get("domainCount", 0)
        columns = []
        for v in piece.get("valuesPerLevel") or []:
            if "universal" in v:
                columns.append([v["universal"]] * n)
            else:
                ind = v.get("individual") or {}
                columns.append([ind.get("prefix", "") + root + ind.get("suffix", "")
                                for root in ind.get("roots") or []])
        counts = piece.get("podCounts") or {}
        counts = counts["individual"] if "individual" in counts else [counts.get("universal", 0)] * n
        for d in range(n):
            slots += [tuple(col[d] for col in columns)] * counts[d]
    return slots


def usage_by_node(assignment, per_pod, into):
    """Adds the pods a hostname-level topologyAssignment places to into[node][resource]."""
    if (assignment.get("levels") or [None])[-1] != HOSTNAME:
        return
    for values in expand(assignment):
        node = into.setdefault(values[-1], {})
        node["pods"] = node.get("pods", 0) + 1
        for r, (v, _b) in per_pod.items():
            node[r] = node.get(r, 0) + v


def place(store, flavor, flavor_name, levels, pod_set, count, used):
    """-> (topologyAssignment, None), or (None, why it does not fit)."""
    if not levels:
        return None, "topology %s of flavor %s not found" % ((flavor.get("spec") or {}).get("topologyName"),
                                                              flavor_name)
    request = pod_set.topology_request
    level = request.get("required") or request.get("preferred")
    if level is not None and level not in levels:
        return None, "topology level %s not found in flavor %s" % (level, flavor_name)
    wanted = (flavor.get("spec") or {}).get("nodeLabels") or {}
    nodes = []
    for (_ns, name), node in store.objects["/nodes"].items():
        labels = node["metadata"].get("labels") or {}
        if all(lv in labels for lv in levels) and all(labels.get(k) == v for k, v in wanted.items()):
            nodes.append((tuple(labels[lv] for lv in levels), _capacity(node, pod_set.per_pod, used.get(name, {}))))
    nodes.sort()
    depth = levels.index(level) + 1 if level is not None else 0
    domains = {}
    for values, cap in nodes:
        domains.setdefault(values[:depth], []).append((values, cap))
    chosen = next((members for _key, members in sorted(domains.items())
                   if sum(cap for _v, cap in members) >= count), None)
    if chosen is None and not request.get("required") and sum(cap for _v, cap in nodes) >= count:
        chosen = nodes
    if chosen is None:
        return None, "topology %s doesn't allow to fit any of %d pod(s)" % (
            (flavor.get("spec") or {}).get("topologyName"), count)
    keep = 1 if levels[-1] == HOSTNAME else len(levels)
    placed, left = [], count
    for values, cap in chosen:
        if left and cap:
            placed.append((values[-keep:], min(cap, left)))
            left -= placed[-1][1]
    return {"levels": levels[-keep:], "slices": [{
        "domainCount": len(placed),
        "valuesPerLevel": [{"individual": {"roots": [values[i] for values, _n in placed]}} for i in range(keep)],
        "podCounts": {"individual": [n for _values, n in placed]}}]}, None


def gated_pods(store):
    """{(namespace, workload, pod set): [pods]} of the pods waiting for Kueue's topology gate."""
    out = {}
    for pod in store.objects["/pods"].values():
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if not any(g.get("name") == TOPOLOGY_GATE for g in spec.get("schedulingGates") or []):
            continue
        wl = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION)
        ps = (meta.get("labels") or {}).get(PODSET_LABEL)
        if wl and ps and not meta.get("deletionTimestamp"):
            out.setdefault((meta["namespace"], wl, ps), []).append(pod)
    return out


def _rank(pod, label):
    value = (pod["metadata"].get("labels") or {}).get(label or "")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def domains_for(pods, assignment, index_label):
    """[(pod, {level: value})]: rank r takes slot r; the rest take the free slots by name."""
    levels, slots = assignment.get("levels") or [], expand(assignment)
    ranked = {r: p for p in pods for r in [_rank(p, index_label)] if r is not None and r < len(slots)}
    free = [i for i in range(len(slots)) if i not in ranked]
    rest = sorted((p for p in pods if p not in ranked.values()), key=lambda p: p["metadata"]["name"])
    pairs = sorted(ranked.items()) + list(zip(free, rest))
    return [(pod, dict(zip(levels, slots[i]))) for i, pod in pairs]


def ungate(pod, selector):
    spec = pod["spec"]
    spec.setdefault("nodeSelector", {}).update(selector)
    gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != TOPOLOGY_GATE]
    if gates:
        spec["schedulingGates"] = gates
    else:
        spec.pop("schedulingGates", None)
