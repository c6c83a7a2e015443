"""Errors as Kubernetes Status bodies: ApiError (raised anywhere, answered by the HTTP handler)
and the field causes of 422 Invalid answers."""

import json


REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           405: "MethodNotAllowed", 406: "NotAcceptable", 409: "Conflict", 410: "Expired",
           413: "RequestEntityTooLarge", 415: "UnsupportedMediaType", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
           504: "Timeout"}


def status_body(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details, self.headers = details, headers or {}

    def body(self):
        return status_body(self.code, self.reason, self.message, self.details)

    @staticmethod
    def _details(rt, name, kind=None):
        d = {}
        if name:
            d["name"] = name
        if rt is not None and rt.group:
            d["group"] = rt.group
        d["kind"] = kind or (rt.plural if rt is not None else "")
        return d

    @classmethod
    def not_found(cls, rt, name):
        return cls(404, "NotFound", '%s "%s" not found' % (rt.qualified, name), cls._details(rt, name))

    @classmethod
    def already_exists(cls, rt, name):
        return cls(409, "AlreadyExists", '%s "%s" already exists' % (rt.qualified, name),
                   cls._details(rt, name))

    @classmethod
    def conflict(cls, rt, name, msg="the object has been modified; please apply your changes "
                                    "to the latest version and try again"):
        return cls(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s' % (rt.qualified, name, msg),
                   cls._details(rt, name))

    @classmethod
    def invalid(cls, rt, name, causes):
        kind = rt.kind + ("." + rt.group if rt.group else "")
        errs = ["%s: %s" % (c["field"], c["message"]) for c in causes]
        agg = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
        d = cls._details(rt, name, kind=rt.kind)
        d["causes"] = causes
        return cls(422, "Invalid", '%s "%s" is invalid: %s' % (kind, name, agg), d)

    @classmethod
    def bad_request(cls, msg):
        return cls(400, "BadRequest", msg)

    @classmethod
    def not_allowed(cls):
        return cls(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    @classmethod
    def path_not_found(cls):
        return cls(404, "NotFound", "the server could not find the requested resource", {})

    @classmethod
    def expired(cls, msg):
        return cls(410, "Expired", msg)


def cause(ctype, field, message):
    return {"reason": ctype, "message": message, "field": field}  # as the real API names it


def required(field, detail=""):
    return cause("FieldValueRequired", field, "Required value" + (": " + detail if detail else ""))


def invalid_value(field, value, detail):
    return cause("FieldValueInvalid", field, "Invalid value: %s: %s" % (json.dumps(value), detail))
