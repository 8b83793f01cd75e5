"""Metric values → what a ctune result may hold: numbers, booleans, null."""
import decimal
import fractions
import math
from collections.abc import Mapping


def to_number(key, v):
    """v as a JSON-ready number, bool or None (NaN and infinities: None).
    numpy scalars, 0-d arrays and one-element torch tensors go through
    .item(), so neither package is ever imported here."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return int(v)  # an int subclass (IntEnum) prints as a plain number
    if isinstance(v, float):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, (decimal.Decimal, fractions.Fraction)):
        return to_number(key, float(v))
    item = getattr(v, "item", None)
    if callable(item) and not isinstance(v, (str, bytes, Mapping)):
        try:
            x = item()
        except (ValueError, RuntimeError, TypeError):
            raise TypeError(f"metric {key!r}: a {type(v).__name__} with more than one value; "
                            f"report one number (e.g. x.mean().item())") from None
        if x is v or not isinstance(x, (bool, int, float, complex)):
            raise TypeError(f"metric {key!r}: {type(v).__name__}.item() gave a "
                            f"{type(x).__name__}, not a number")
        if isinstance(x, complex):
            raise TypeError(f"metric {key!r} is complex; report a real number")
        return to_number(key, x)
    raise TypeError(f"metric {key!r} is a {type(v).__name__} ({v!r:.60}); a ctune result holds "
                    f"only numbers, booleans and None")


def flatten(metrics, prefix=""):
    """A flat dict of JSON-ready values; nested dicts become "a/b" keys, as
    Ray Tune flattens them."""
    out = {}
    for k, v in metrics.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = to_number(key, v)
    return out
