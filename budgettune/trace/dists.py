"""Length distribution specs: "lognormal:mean=1000,sigma=1.0,max=8192", "fixed:512", "uniform:...".

A spec parses once into a :class:`LengthDist`, which draws whole token counts >= 1 from a
seeded numpy Generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from budgettune.core.errors import SpecError
from budgettune.core.limits import MAX_TOKENS

MAX_SIGMA = 10.0  # a lognormal's sigma: e^10 is already 22,000 times the median

_KNOWN = {
    "lognormal": ({"mean", "sigma", "min", "max"}, "lognormal:mean=1000,sigma=1.0,max=8192"),
    "fixed": (set(), "fixed:512"),
    "uniform": ({"min", "max"}, "uniform:min=64,max=4096"),
}


@dataclass(frozen=True, slots=True)
class LengthDist:
    """A token-length distribution. For lognormal, ``mean`` is the mean of the distribution
    before clipping (not of log x); sigma is the standard deviation of log x (default 1.0)."""

    kind: str
    mean: float = 0.0
    sigma: float = 1.0
    min_tokens: int = 1
    max_tokens: int | None = None
    spec: str = ""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` lengths as int64, each within [min_tokens, max_tokens]."""
        if self.kind == "fixed":
            values = np.full(n, self.mean)
        elif self.kind == "uniform":
            assert self.max_tokens is not None
            values = rng.integers(self.min_tokens, self.max_tokens + 1, size=n).astype(float)
        else:
            mu = math.log(self.mean) - self.sigma**2 / 2.0
            values = rng.lognormal(mu, self.sigma, size=n)
        upper = self.max_tokens if self.max_tokens is not None else MAX_TOKENS
        return np.clip(np.rint(values), self.min_tokens, upper).astype(np.int64)


def parse_length_dist(spec: str, *, field: str = "prompt_dist") -> LengthDist:
    """Parse a spec string; raises SpecError on ``field`` showing a valid example."""
    text = str(spec).strip()
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind not in _KNOWN:
        examples = "; ".join(example for _, example in _KNOWN.values())
        raise SpecError(f"unknown distribution {text[:40]!r}; use one of: {examples}", field=field)
    allowed, example = _KNOWN[kind]
    if kind == "fixed":
        digits = rest.strip()
        if not digits.isascii() or not digits.isdigit():  # int() would read "1_6" as 16
            raise SpecError(f"{spec!r}: expected e.g. {example}", field=field)
        value = int(digits)
        if value < 1:
            raise SpecError(f"{spec!r}: length must be at least 1", field=field)
        if value > MAX_TOKENS:
            raise SpecError(f"{spec!r}: at most {MAX_TOKENS:,} tokens", field=field)
        return LengthDist("fixed", mean=value, min_tokens=value, max_tokens=value, spec=text)
    params: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value_text = part.partition("=")
        key = key.strip()
        if key in params:  # "mean=1000,mean=5": which one was meant is anyone's guess
            raise SpecError(f"{spec!r}: {key} given twice", field=field)
        if not eq or key not in allowed:
            raise SpecError(
                f"{spec!r}: unknown parameter {key!r}; "
                f"{kind} takes {', '.join(sorted(allowed))} (e.g. {example})",
                field=field,
            )
        try:
            params[key] = float(value_text)
        except ValueError:
            raise SpecError(
                f"{spec!r}: {key}={value_text!r} is not a number", field=field
            ) from None
        if not math.isfinite(params[key]) or params[key] <= 0:
            raise SpecError(f"{spec!r}: {key} must be positive", field=field)
        limit = MAX_SIGMA if key == "sigma" else MAX_TOKENS
        if params[key] > limit:
            raise SpecError(f"{spec!r}: {key} must be at most {limit:,g}", field=field)
    min_tokens = int(params.get("min", 1))
    max_tokens = int(params["max"]) if "max" in params else None
    if max_tokens is not None and max_tokens < min_tokens:
        raise SpecError(f"{spec!r}: max must be at least min", field=field)
    if kind == "uniform":
        if max_tokens is None:
            raise SpecError(f"{spec!r}: uniform needs max (e.g. {example})", field=field)
        return LengthDist(
            "uniform",
            mean=(min_tokens + max_tokens) / 2,
            min_tokens=min_tokens,
            max_tokens=max_tokens,
            spec=text,
        )
    if "mean" not in params:
        raise SpecError(f"{spec!r}: lognormal needs mean (e.g. {example})", field=field)
    return LengthDist(
        "lognormal",
        mean=params["mean"],
        sigma=params.get("sigma", 1.0),
        min_tokens=min_tokens,
        max_tokens=max_tokens,
        spec=text,
    )
