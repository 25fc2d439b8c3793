"""A sweep :class:`~budgettune.tune.point.Point` as JSON and back: the one place a point meets a
file (points.jsonl, recommendation.json's ``points``, the sweep's results.json). The keys and
their order are the documents' since schema 1; reading validates every field it types.
"""

from __future__ import annotations

import math
from typing import Any

from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.fields import Fields
from budgettune.core.limits import MAX_TOKENS
from budgettune.core.units import finite_or_none
from budgettune.tune.point import (
    AtSlo,
    Confidence,
    Goodput,
    GoodputProbe,
    Interval,
    PercentilesMs,
    Point,
    Predicted,
    Role,
    Status,
    StopReason,
    SummaryMs,
)

_PERCENTILES = ("p50", "p90", "p99", "p999", "max")
_METRICS = (("ttft_ms", "ttft"), ("tbt_ms", "tbt"), ("tpot_ms", "tpot"), ("e2e_ms", "e2e"))
SUMMARY_KEYS = frozenset({*(key for key, _ in _METRICS), "throughput_tokens_per_s", "completed",
                          "failed"})  # fmt: skip


def summary_json(summary: SummaryMs) -> dict[str, object]:
    """As :meth:`MetricsSummary.to_json` writes it."""
    out: dict[str, object] = {
        key: {name: getattr(getattr(summary, attr), name) for name in _PERCENTILES}
        for key, attr in _METRICS
    }
    out.update(
        throughput_tokens_per_s=summary.throughput_tokens_per_s,
        completed=summary.completed,
        failed=summary.failed,
    )
    return out


def read_summary(fields: Fields) -> SummaryMs:
    metrics = {}
    for key, attr in _METRICS:
        child = fields.child(key)
        metrics[attr] = PercentilesMs(*(child.number_or_none(name) for name in _PERCENTILES))
    return SummaryMs(
        **metrics,
        throughput_tokens_per_s=fields.number_or_none("throughput_tokens_per_s"),
        completed=fields.integer("completed"),
        failed=fields.integer("failed"),
    )


def predicted_json(predicted: Predicted | None) -> dict[str, object] | None:
    """The simulator's summary plus TBT and TTFT at the SLO percentile and the decode batch."""
    if predicted is None:
        return None
    out: dict[str, object] = {
        **summary_json(predicted.summary),
        "tbt_at_slo_ms": predicted.tbt_at_slo_ms,
        "ttft_at_slo_ms": predicted.ttft_at_slo_ms,
        "decode_batch": predicted.decode_batch,
    }
    if predicted.prefix_cache_hit_share is not None:
        out["prefix_cache_hit_share"] = round(predicted.prefix_cache_hit_share, 4)
    return out


def read_predicted(fields: Fields | None) -> Predicted | None:
    if fields is None:
        return None
    return Predicted(
        summary=read_summary(fields),
        tbt_at_slo_ms=fields.number_or_none("tbt_at_slo_ms"),
        ttft_at_slo_ms=fields.number_or_none("ttft_at_slo_ms"),
        decode_batch=fields.number("decode_batch"),
        prefix_cache_hit_share=fields.number_or_none(
            "prefix_cache_hit_share", minimum=0, maximum=1
        ),
    )


def point_json(point: Point) -> dict[str, object]:
    """A point as points.jsonl and recommendation.json hold it (an engine that failed to start
    has no measured keys; goodput keys only after a goodput search)."""
    out: dict[str, object] = {
        "budget": point.budget,
        "role": point.role.value,
        # one request, or all at one instant, has no rate: null (read back as infinity)
        "rate": finite_or_none(point.rate_per_s),
        "predicted": predicted_json(point.predicted),
        "status": point.status.value,
    }
    if point.slot is not None or point.round is not None:  # written since sweep --parallel
        out.update(slot=point.slot, round=point.round)
    if point.measured is None:
        out.update(
            error=point.error,
            log_tail=point.log_tail,
            tbt_ok=point.tbt_ok,
            ttft_ok=point.ttft_ok,
            ok=point.ok,
            wall_s=point.wall_s,
        )
    else:
        out.update(
            measured={**summary_json(point.measured), **at_slo_json(point)},
            tbt_ms=point.tbt_ms,
            ttft_ms=point.ttft_ms,
            tbt_ok=point.tbt_ok,
            ttft_ok=point.ttft_ok,
            ok=point.ok,
            complete=point.complete,
            early_stop=point.stop_message if point.stopped_early else None,
            error=point.error,
            log_tail=point.log_tail,
            engine=None if point.engine is None else dict(point.engine),
            results_file=point.results_file,
            selfcheck=None if point.selfcheck is None else dict(point.selfcheck),
            wall_s=point.wall_s,
            confidence=None if point.confidence is None else point.confidence.value,
            replays=point.replays,
            client_warnings=list(point.client_warnings),
            replay_files=list(point.replay_files),
        )
        if point.prefix_cache is not None:
            out["prefix_cache"] = point.prefix_cache.to_json()
    if point.goodput is not None:
        out.update(
            goodput_rate=point.goodput.rate_per_s,
            goodput_capped=point.goodput.capped,
            goodput_probes=[_probe_json(probe) for probe in point.goodput.probes],
        )
    return out


def at_slo_json(point: Point) -> dict[str, object]:
    """TBT and TTFT at the SLO percentile and their 95% intervals (``measured.*_at_slo_*``)."""
    return {
        "tbt_at_slo_ms": point.tbt_ms,
        "ttft_at_slo_ms": point.ttft_ms,
        "tbt_at_slo_ci_ms": None if point.tbt_ci_ms is None else list(point.tbt_ci_ms),
        "ttft_at_slo_ci_ms": None if point.ttft_ci_ms is None else list(point.ttft_ci_ms),
    }


def _read_interval(fields: Fields | None, name: str) -> Interval | None:
    if fields is None or fields.data.get(name) is None:
        return None
    value = fields.data[name]
    ok = isinstance(value, list) and len(value) == 2
    if ok and all(v is None or (isinstance(v, int | float) and not isinstance(v, bool))
                  for v in value):  # fmt: skip
        low, high = value
        return (None if low is None else float(low), None if high is None else float(high))
    fields.fail(name, "[low, high] in milliseconds", value)


def _probe_json(probe: GoodputProbe) -> dict[str, object]:
    out: dict[str, object] = {
        "rate": probe.rate_per_s,
        "met": probe.met,
        "tbt_p99_ms": probe.tbt_p99_ms,
        "ttft_p99_ms": probe.ttft_p99_ms,
    }
    if probe.at_slo is not None:
        out.update(tbt_at_slo_ms=probe.at_slo.tbt_ms, ttft_at_slo_ms=probe.at_slo.ttft_ms)
    out["failed"] = probe.failed
    return out


def _read_probe(fields: Fields) -> GoodputProbe:
    at_slo = None
    if fields.has("tbt_at_slo_ms") or fields.has("ttft_at_slo_ms"):
        at_slo = AtSlo(
            fields.number_or_none("tbt_at_slo_ms"), fields.number_or_none("ttft_at_slo_ms")
        )
    return GoodputProbe(
        rate_per_s=fields.number("rate"),
        met=fields.flag("met"),
        tbt_p99_ms=fields.number_or_none("tbt_p99_ms"),
        ttft_p99_ms=fields.number_or_none("ttft_p99_ms"),
        at_slo=at_slo,
        failed=fields.integer("failed"),
    )


def _choice(fields: Fields, name: str, kind: type[Status] | type[Role]) -> Any:
    value = fields.text(name)
    try:
        return kind(value)
    except ValueError:
        fields.fail(name, "one of " + ", ".join(m.value for m in kind), value)


def read_point(value: object, where: str) -> Point:
    """A point from its JSON object. Raises UserError naming ``where`` and the field.

    Accepts the sweep's results.json shape too, where the measured summary is flattened into
    the point (and ``records`` sit beside it: not read here)."""
    fields = Fields.of(value, where)
    status = _choice(fields, "status", Status)
    measured = None
    at_slo = fields.child("measured") if fields.has("measured") else None
    if at_slo is not None and any(at_slo.has(key) for key in SUMMARY_KEYS):
        measured = read_summary(at_slo)
    elif status is not Status.ENGINE_FAILED and fields.has("tbt_ms") and fields.has("completed"):
        measured = read_summary(fields)  # results.json: the summary at the top level
    early = fields.text_or_none("early_stop")
    stopped_by = (
        StopReason.EARLY_STOP
        if early is not None
        else StopReason.ERROR_RATE
        if status is Status.ABORTED
        else None
    )
    goodput = None
    if fields.has("goodput_rate") and fields.data.get("goodput_rate") is not None:
        goodput = Goodput(
            rate_per_s=fields.number("goodput_rate"),
            capped=fields.flag("goodput_capped"),
            probes=tuple(
                _read_probe(Fields.of(item, f"{where}: goodput_probes[{index}]"))
                for index, item in enumerate(fields.items("goodput_probes"))
            ),
        )
    # The verdict's figures: measured.*_at_slo_ms, else (written before them) the point's own
    # tbt_ms/ttft_ms; the flat results.json shape of that time kept none.
    if at_slo is not None and at_slo.has("tbt_at_slo_ms"):
        tbt_ms, ttft_ms = (
            at_slo.number_or_none("tbt_at_slo_ms"),
            at_slo.number_or_none("ttft_at_slo_ms"),
        )
    elif measured is not None and at_slo is not None:
        tbt_ms, ttft_ms = fields.number_or_none("tbt_ms"), fields.number_or_none("ttft_ms")
    else:
        tbt_ms = ttft_ms = None
    confidence_text = fields.text_or_none("confidence")
    try:
        confidence = None if confidence_text is None else Confidence(confidence_text)
    except ValueError:
        fields.fail("confidence", "clear or marginal", confidence_text)
    return Point(
        budget=fields.integer("budget", minimum=1, maximum=MAX_TOKENS),
        role=_choice(fields, "role", Role),
        rate_per_s=_rate(fields),
        predicted=read_predicted(fields.child_or_none("predicted")),
        status=status,
        tbt_ok=fields.flag_or_none("tbt_ok"),
        ttft_ok=fields.flag_or_none("ttft_ok"),
        ok=fields.flag("ok"),
        wall_s=fields.number("wall_s", minimum=0),
        error=fields.text_or_none("error"),
        log_tail=fields.text_or_none("log_tail"),
        measured=measured,
        tbt_ms=tbt_ms,
        ttft_ms=ttft_ms,
        complete=bool(fields.flag_or_none("complete")),
        stopped_by=stopped_by,
        stop_message=early,
        engine=fields.mapping_or_none("engine"),
        results_file=fields.text_or_none("results_file"),
        selfcheck=fields.mapping_or_none("selfcheck"),
        goodput=goodput,
        tbt_ci_ms=_read_interval(at_slo, "tbt_at_slo_ci_ms"),
        ttft_ci_ms=_read_interval(at_slo, "ttft_at_slo_ci_ms"),
        confidence=confidence,
        replays=fields.integer_or_none("replays") or 1,
        client_warnings=tuple(str(w) for w in fields.data.get("client_warnings") or ()),
        replay_files=tuple(str(f) for f in fields.data.get("replay_files") or ()),
        slot=fields.integer_or_none("slot"),
        round=fields.integer_or_none("round"),
        prefix_cache=_read_cache(fields.child_or_none("prefix_cache")),
    )


def _read_cache(fields: Fields | None) -> PrefixCacheCount | None:
    """A point's ``prefix_cache``: whole token counts, hits at most the queries."""
    if fields is None:
        return None
    queries = fields.integer("queries_tokens", minimum=0)
    hits = fields.integer("hits_tokens", minimum=0, maximum=queries)
    return PrefixCacheCount(queries, hits)


def read_points(items: object, where: str) -> list[Point]:
    """Every point of a document's ``points`` list."""
    if not isinstance(items, list):
        raise Fields({}, where).fail("points", "a list", items)
    return [read_point(item, f"{where}: points[{index}]") for index, item in enumerate(items)]


def flat_point_json(point: Point) -> dict[str, object]:
    """The sweep's results.json shape: the measured summary at the top level, like a replay."""
    full = point_json(point)
    full.pop("measured", None)  # a failed engine start has none
    if point.measured is not None:
        full.update(summary_json(point.measured))
        full["measured"] = at_slo_json(point)  # the verdict's figures keep their place
    return full


def _rate(fields: Fields) -> float:
    """A point's arrival rate; null (one request, or all at one instant) is infinite."""
    rate = fields.number_or_none("rate", minimum=0)
    return math.inf if rate is None else rate
