"""Patches: JSON merge patch (RFC 7386), strategic merge patch by a built-in table of merge keys,
and JSON patch (RFC 6902)."""

import copy
import json


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


SMP_MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
                  "volumes": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
                  "imagePullSecrets": "name", "hostAliases": "ip", "ownerReferences": "uid",
                  "conditions": "type", "resourceClaims": "name", "topologySpreadConstraints": "topologyKey",
                  "secrets": "name", "subjects": None}
SMP_PRIMITIVE_MERGE = {"finalizers"}
_DELETE = object()


def _smp_merge_key(field, items):
    if field == "ports":
        return "containerPort" if any(isinstance(x, dict) and "containerPort" in x for x in items) else "port"
    return SMP_MERGE_KEYS.get(field)


def strategic_merge_patch(orig, patch):
    """A strategic merge patch for built-in types: lists are merged by the
    patchMergeKey of a small built-in table; $patch, $setElementOrder,
    $deleteFromPrimitiveList and $retainKeys directives are understood."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(orig) if isinstance(orig, dict) else {}
    orders = {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            f = k.split("/", 1)[1]
            if isinstance(result.get(f), list):
                result[f] = [x for x in result[f] if x not in v]
            continue
        if v is None:
            result.pop(k, None)
        elif isinstance(v, dict):
            sub = strategic_merge_patch(result.get(k), v)
            if sub is _DELETE:
                result.pop(k, None)
            else:
                result[k] = sub
        elif isinstance(v, list):
            result[k] = _smp_list(k, result.get(k), v)
        else:
            result[k] = v
    if isinstance(patch.get("$retainKeys"), list):
        keep = set(patch["$retainKeys"])
        result = {k: v for k, v in result.items() if k in keep}
    for f, order in orders.items():
        lst = result.get(f)
        if not isinstance(lst, list):
            continue
        key = _smp_merge_key(f, lst + order)
        ident = (lambda x: x.get(key) if isinstance(x, dict) else x) if key else (lambda x: x)
        pos = {json.dumps(ident(o), sort_keys=True): i for i, o in enumerate(order)}
        result[f] = sorted(lst, key=lambda x: pos.get(json.dumps(ident(x), sort_keys=True), len(pos)))
    return result


def _smp_list(field, orig, patch):
    orig = orig if isinstance(orig, list) else []
    if field in SMP_PRIMITIVE_MERGE:
        out = list(orig)
        for x in patch:
            if x not in out:
                out.append(x)
        return out
    key = _smp_merge_key(field, orig + patch)
    if not key or not all(isinstance(x, dict) for x in patch):
        return copy.deepcopy([x for x in patch if not (isinstance(x, dict) and x.get("$patch"))])
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return copy.deepcopy([x for x in patch if x.get("$patch") != "replace"])
    out = list(orig)
    for pe in patch:
        idx = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == pe.get(key)), None)
        if pe.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append({k: copy.deepcopy(v) for k, v in pe.items() if not k.startswith("$")})
        else:
            out[idx] = strategic_merge_patch(out[idx], pe)
    return out


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError("invalid JSON pointer %r" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc, ops):
    """RFC 6902 JSON patch."""
    if not isinstance(ops, list):
        raise ValueError("a JSON patch must be an array of operations")
    doc = copy.deepcopy(doc)

    def parent(path):
        parts = _pointer(path)
        if not parts:
            raise ValueError("cannot operate on the document root")
        cur = doc
        for p in parts[:-1]:
            if isinstance(cur, list):
                cur = cur[int(p)]
            elif isinstance(cur, dict) and p in cur:
                cur = cur[p]
            else:
                raise ValueError("missing path %s" % path)
        return cur, parts[-1]

    def get(path):
        cur = doc
        for p in _pointer(path):
            if isinstance(cur, list):
                cur = cur[int(p)]
            elif isinstance(cur, dict) and p in cur:
                cur = cur[p]
            else:
                raise ValueError("missing path %s" % path)
        return cur

    def add(path, value):
        cont, last = parent(path)
        if isinstance(cont, list):
            if last == "-":
                cont.append(value)
            else:
                i = int(last)
                if i < 0 or i > len(cont):
                    raise ValueError("index out of range in %s" % path)
                cont.insert(i, value)
        elif isinstance(cont, dict):
            cont[last] = value
        else:
            raise ValueError("cannot add at %s" % path)

    def remove(path):
        cont, last = parent(path)
        if isinstance(cont, list):
            return cont.pop(int(last))
        if isinstance(cont, dict) and last in cont:
            return cont.pop(last)
        raise ValueError("missing path %s" % path)

    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ValueError("invalid operation %r" % (op,))
        kind, path = op["op"], op["path"]
        try:
            if kind == "add":
                add(path, copy.deepcopy(op["value"]))
            elif kind == "remove":
                remove(path)
            elif kind == "replace":
                remove(path)
                add(path, copy.deepcopy(op["value"]))
            elif kind == "move":
                add(path, remove(op["from"]))
            elif kind == "copy":
                add(path, copy.deepcopy(get(op["from"])))
            elif kind == "test":
                if get(path) != op.get("value"):
                    raise ValueError("testing value %s failed" % path)
            else:
                raise ValueError("unexpected kind: %s" % kind)
        except (IndexError, KeyError, TypeError) as e:
            raise ValueError("%s %s: %s" % (kind, path, e))
    return doc
