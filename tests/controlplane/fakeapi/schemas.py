"""Custom resources checked against their CRD's structural schema, as the real API server does
for the groups a test names (POST /fake/v1/config {"validateGroups": [...]}): nulls of
non-nullable fields and unknown fields are pruned, `default`s applied, then the object is
validated with jsonschema (Debian's python3-jsonschema). x-kubernetes-int-or-string is
anyOf integer/string, x-kubernetes-list-type map/set lists must not repeat a key. CEL rules
(x-kubernetes-validations) are not evaluated: a group's own rules are hand-written and
registered in RULES (kueue.py's Workload rules)."""

import copy
import json

from .errors import ApiError, cause, invalid_value, required


# storage key -> function(new, old) -> causes: the rules the schema cannot say (CEL, webhooks)
RULES = {}

_KEEP_AT_ROOT = ("apiVersion", "kind", "metadata")
_JSONSCHEMA_KEYS = {"type", "properties", "items", "additionalProperties", "required", "enum", "pattern",
                    "maxLength", "minLength", "maxItems", "minItems", "maximum", "minimum", "exclusiveMaximum",
                    "exclusiveMinimum", "multipleOf", "maxProperties", "minProperties", "anyOf", "allOf",
                    "oneOf", "not", "uniqueItems"}


def normalize(obj, schema, root=True):
    """Prunes and defaults obj in place by the structural schema, as the API server does on
    every write: nulls of non-nullable fields and fields the schema does not know go (unless
    x-kubernetes-preserve-unknown-fields), then missing fields with a `default` get it."""
    if not isinstance(schema, dict):
        return
    if isinstance(obj, dict) and schema.get("type") == "object":
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
        for key in list(obj):
            if root and key in _KEEP_AT_ROOT:
                continue
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if obj[key] is None and not (sub or {}).get("nullable"):
                del obj[key]
            elif sub is not None:
                normalize(obj[key], sub, False)
            elif not keep_unknown:
                del obj[key]
        for key, sub in props.items():
            if key not in obj and isinstance(sub, dict) and "default" in sub:
                obj[key] = copy.deepcopy(sub["default"])
                normalize(obj[key], sub, False)
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            normalize(item, schema["items"], False)


def to_jsonschema(schema):
    """The OpenAPI v3 schema as a draft-4 JSON schema: nullable as a "null" type,
    x-kubernetes-int-or-string as anyOf integer/string; descriptions, formats and Kubernetes
    extensions dropped."""
    if isinstance(schema, list):
        return [to_jsonschema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k not in _JSONSCHEMA_KEYS:
            continue
        if k == "properties":
            out[k] = {name: to_jsonschema(s) for name, s in v.items()}
        elif k in ("items", "additionalProperties", "not", "anyOf", "allOf", "oneOf"):
            out[k] = to_jsonschema(v)
        else:
            out[k] = v
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object",
               type(None): "null"}


def _path(parts):
    out = ""
    for p in parts:
        out += "[%d]" % p if isinstance(p, int) else ("." if out else "") + str(p)
    return out


def _error_cause(err):
    """A jsonschema error as the API server's field cause."""
    field = _path(err.absolute_path)
    v, inst = err.validator, err.instance
    if v == "required":
        missing = [p for p in err.validator_value if isinstance(inst, dict) and p not in inst]
        return required(_path(list(err.absolute_path) + missing[:1]))
    if v == "maxItems":
        return cause("FieldValueTooMany", field, "Too many: %d: must have at most %d items"
                     % (len(inst), err.validator_value))
    if v == "maxLength":
        return cause("FieldValueTooLong", field, "Too long: may not be more than %d bytes" % err.validator_value)
    if v == "enum":
        return cause("FieldValueNotSupported", field, "Unsupported value: %s: supported values: %s" % (
            json.dumps(inst), ", ".join(json.dumps(e) for e in err.validator_value)))
    if v == "type":
        return cause("FieldValueTypeInvalid", field, "Invalid value: %s: %s in body must be of type %s: %s" % (
            json.dumps(_JSON_TYPES.get(type(inst), "object")), field, err.validator_value, json.dumps(inst)))
    if v == "pattern":
        return invalid_value(field, inst, "%s in body should match '%s'" % (field, err.validator_value))
    return invalid_value(field, inst, "%s in body: %s" % (field, err.message))


def _list_key_causes(obj, schema, path=()):
    """Duplicates in x-kubernetes-list-type map (by its keys) and set lists."""
    causes = []
    if not isinstance(schema, dict):
        return causes
    if isinstance(obj, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for k, v in obj.items():
            sub = props.get(k, extra if isinstance(extra, dict) else None)
            causes += _list_key_causes(v, sub, path + (k,))
    elif isinstance(obj, list):
        kind, keys = schema.get("x-kubernetes-list-type"), schema.get("x-kubernetes-list-map-keys") or []
        seen = set()
        for i, item in enumerate(obj):
            if kind == "map" and isinstance(item, dict):
                key = json.dumps([item.get(k) for k in keys])
                if key in seen:
                    causes.append(cause("FieldValueDuplicate", _path(path + (i,)), "Duplicate value: %s"
                                        % json.dumps({k: item.get(k) for k in keys})))
            elif kind == "set":
                key = json.dumps(item, sort_keys=True)
                if key in seen:
                    causes.append(cause("FieldValueDuplicate", _path(path + (i,)), "Duplicate value: " + key))
            else:
                key = None
            seen.add(key)
            causes += _list_key_causes(item, schema.get("items"), path + (i,))
    return causes


def require(*modules):
    """Imports the optional modules schema checks and the Kueue stand-in need, or says which
    package is missing (the rest of the server is standard library only)."""
    import importlib
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ApiError(500, "InternalError", "the fake API server needs python3-%s for this (%s)"
                           % (name.lower(), e))


class SchemaChecks:
    """The compiled schemas of the CRDs whose groups are validated (part of Store)."""

    def __init__(self):
        self.validate_groups = set()
        self.compiled = {}     # (crd uid, crd resourceVersion, version) -> (schema, jsonschema validator)

    def _schema(self, store, rt):
        crd = store.objects["apiextensions.k8s.io/customresourcedefinitions"].get(("", rt.crd or ""))
        if crd is None:
            return None
        meta = crd["metadata"]
        key = (meta["uid"], meta["resourceVersion"], rt.version)
        if key not in self.compiled:
            import jsonschema   # only tests that validate custom resources need python3-jsonschema
            ver = next((v for v in crd["spec"].get("versions") or [] if v.get("name") == rt.version), {})
            schema = (ver.get("schema") or {}).get("openAPIV3Schema")
            if not isinstance(schema, dict):
                return None
            self.compiled = {k: v for k, v in self.compiled.items() if k[0] != meta["uid"]}
            self.compiled[key] = (schema, jsonschema.Draft4Validator(to_jsonschema(schema)))
        return self.compiled[key]

    def check(self, store, rt, obj, old):
        """Prunes and defaults obj in place; -> the causes that make it invalid."""
        if not rt.custom or rt.group not in self.validate_groups:
            return []
        compiled = self._schema(store, rt)
        if compiled is None:
            return []
        schema, validator = compiled
        normalize(obj, schema)
        errors = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
        causes = [_error_cause(e) for e in errors] + _list_key_causes(obj, schema)
        rule = RULES.get(rt.storage_key)
        if rule is not None and not causes:
            causes = rule(obj, old)
        return causes
