"""Kubernetes resource quantities ("500m", "16Gi", "2", "1e3") as exact Fractions, and back to
the canonical strings the API writes (resource.Quantity's String())."""

import fractions
import re


_SUFFIX = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
           "n": fractions.Fraction(1, 10 ** 9), "u": fractions.Fraction(1, 10 ** 6),
           "m": fractions.Fraction(1, 1000), "": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12,
           "P": 10 ** 15, "E": 10 ** 18}
_RE = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?\Z")


def parse(q):
    """A quantity (string or number) -> (Fraction, binary) where binary says it had a 2**10 suffix;
    ValueError when it is not one."""
    if isinstance(q, bool):
        raise ValueError("not a quantity: %r" % (q,))
    if isinstance(q, (int, float)):
        return fractions.Fraction(q), False
    m = _RE.match(str(q).strip())
    if not m:
        raise ValueError("quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    num, suffix = fractions.Fraction(m.group(1)), m.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return num * fractions.Fraction(10) ** int(suffix[1:]), False
    return num * _SUFFIX[suffix], suffix.endswith("i")


def value(q):
    return parse(q)[0]


def format_quantity(v, binary=False):
    """The canonical string of Fraction v: a power-of-1024 suffix for binary quantities that are
    whole multiples of one, else the largest decimal SI suffix that keeps the number whole
    (rounding up to the nano as the API does)."""
    v = fractions.Fraction(v)
    if v == 0:
        return "0"
    sign, v = ("-" if v < 0 else ""), abs(v)
    if binary and v.denominator == 1 and v >= 1024:
        n, suffix = int(v), ""
        for s in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
            if n % 1024:
                break
            n, suffix = n // 1024, s
        return sign + str(n) + suffix
    nanos = -(-v.numerator * 10 ** 9 // v.denominator)       # ceiling, as Quantity rounds up
    for s, exp in (("E", 27), ("P", 24), ("T", 21), ("G", 18), ("M", 15), ("k", 12), ("", 9),
                   ("m", 6), ("u", 3), ("n", 0)):
        if nanos % 10 ** exp == 0:
            return sign + str(nanos // 10 ** exp) + s
    return sign + str(nanos) + "n"
