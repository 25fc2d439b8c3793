"""Plotly figures of one run: the workload (length histograms, arrival rate over time) and the
token timeline of a replay (tokens per request over time, stalls highlighted), downsampled so a
2,000-request run stays small in the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from budgettune.core.units import format_ms
from budgettune.report.charts import (
    FAIL_COLOR,
    MEASURED_COLOR,
    NEUTRAL_COLOR,
    TEMPLATE,
    Chart,
    round_sig,
)
from budgettune.report.inputs import TimelineInput, TimelineRequest, WorkloadInput

MAX_TIMELINE_REQUESTS = 60
MAX_TIMELINE_TOKENS = 12_000


def _histogram(
    values: npt.NDArray[np.int64], bins: int = 40
) -> tuple[list[float], list[int], float]:
    """Bin centres, counts and the bin width (tokens) of a length histogram."""
    data = np.asarray(values, dtype=np.float64)
    low, high = float(data.min()), float(data.max())
    if high <= low:
        high = low + 1.0
    counts, edges = np.histogram(data, bins=bins, range=(low, high))
    centres = (edges[:-1] + edges[1:]) / 2
    return [float(c) for c in centres], [int(c) for c in counts], float(edges[1] - edges[0])


def workload_lengths_chart(workload: WorkloadInput) -> Chart:
    """Histograms of prompt and output lengths, side by side."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("prompt tokens", "output tokens"))
    for col, (values, color) in enumerate(
        ((workload.prompt_tokens, MEASURED_COLOR), (workload.output_tokens, "#8250df")), start=1
    ):
        centres, counts, width = _histogram(values)
        fig.add_trace(
            go.Bar(
                x=centres,
                y=counts,
                width=width * 0.95,
                marker={"color": color},
                showlegend=False,
                hovertemplate="%{x:.0f} tokens: %{y} requests<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text="length (tokens)", row=1, col=col)
        fig.update_yaxes(title_text="requests (count)", row=1, col=col)
    fig.update_layout(template=TEMPLATE, height=340, margin={"l": 70, "r": 30, "t": 40, "b": 60})
    prompt = np.asarray(workload.prompt_tokens, dtype=np.float64)
    output = np.asarray(workload.output_tokens, dtype=np.float64)
    caption = (
        f"{len(prompt):,} requests. Prompts: mean {prompt.mean():,.0f}, p50 "
        f"{np.median(prompt):,.0f}, p99 {np.percentile(prompt, 99):,.0f}, max {prompt.max():,.0f} "
        f"tokens. Outputs: mean {output.mean():,.0f}, p99 {np.percentile(output, 99):,.0f} tokens. "
        "Long prompts are what chunking splits; long outputs are the decodes it protects. A "
        "workload of very short outputs (prefill-only) gains nothing from a small budget."
    )
    return Chart("chart-workload-lengths", "Prompt and output lengths", fig, caption)


def arrival_rate_chart(workload: WorkloadInput) -> Chart | None:
    """Requests per second over the run, from the intended send times; None without them."""
    if workload.arrival_s is None or len(workload.arrival_s) < 2:
        return None
    arrivals = np.sort(np.asarray(workload.arrival_s, dtype=np.float64))
    span = float(arrivals[-1] - arrivals[0])
    if span <= 0:
        return None
    bins = int(min(120, max(10, len(arrivals) // 20)))
    counts, edges = np.histogram(arrivals, bins=bins)
    width = float(edges[1] - edges[0])
    mean_rate = (len(arrivals) - 1) / span
    fig = go.Figure(
        go.Scatter(
            x=round_sig((edges[:-1] + edges[1:]) / 2),
            y=round_sig(counts / width),
            mode="lines",
            line={"color": MEASURED_COLOR, "shape": "hvh"},
            name=f"arrival rate per {width:.3g} s bin",
            hovertemplate="t=%{x:.3g} s: %{y:.3g} requests/s<extra></extra>",
        )
    )
    fig.add_hline(
        y=mean_rate,
        line={"color": NEUTRAL_COLOR, "dash": "dot"},
        annotation_text=f"mean {mean_rate:.3g} requests/s",
        annotation_position="top right",
    )
    fig.update_layout(template=TEMPLATE, height=300, margin={"l": 70, "r": 30, "t": 30, "b": 60})
    fig.update_xaxes(title_text="time since the first request (s)")
    fig.update_yaxes(title_text="arrival rate (requests/s)", rangemode="tozero")
    peak = float((counts / width).max())
    caption = (
        f"Mean {mean_rate:.3g} requests/s over {span:,.1f} s; the busiest bin reaches "
        f"{peak:.3g} requests/s. Bursts above the mean are when queues, and TTFT, grow."
    )
    return Chart("chart-arrivals", "Arrival rate over time", fig, caption)


def _worst_gap(requests: tuple[TimelineRequest, ...]) -> tuple[float, float]:
    """(time of the largest inter-token gap's end, its length), both seconds; (0, 0) if none."""
    best_t, best_gap = 0.0, 0.0
    for request in requests:
        times = request.token_times_s
        if len(times) >= 2:
            gaps = np.diff(times)
            index = int(np.argmax(gaps))
            if gaps[index] > best_gap:
                best_t, best_gap = float(times[index + 1]), float(gaps[index])
    return best_t, best_gap


def select_timeline(
    timeline: TimelineInput,
    *,
    max_requests: int = MAX_TIMELINE_REQUESTS,
    max_tokens: int = MAX_TIMELINE_TOKENS,
) -> tuple[list[TimelineRequest], tuple[float, float]]:
    """The requests and time window to draw: around the largest stall, at most ``max_requests``
    requests active in the window and about ``max_tokens`` token marks. Deterministic."""
    requests = timeline.requests
    if not requests:
        return [], (0.0, 0.0)
    stall_t, _ = _worst_gap(requests)
    ends = [float(r.token_times_s[-1]) if len(r.token_times_s) else r.sent_s for r in requests]
    t_start = min(r.sent_s for r in requests)
    t_end = max(ends)
    total_tokens = sum(len(r.token_times_s) for r in requests)
    # Shrink the window around the stall until the tokens inside fit the mark budget.
    window = t_end - t_start
    if total_tokens > max_tokens and window > 0:
        window *= max_tokens / total_tokens
    low = max(t_start, stall_t - window / 2)
    high = min(t_end, low + window)
    low = max(t_start, high - window)
    active = [r for r, end in zip(requests, ends, strict=True) if r.sent_s <= high and end >= low]
    if len(active) > max_requests:
        # Keep the requests that were running at the stall first, then the earliest sent.
        at_stall = [r for r in active if r.sent_s <= stall_t <= _end(r)]
        rest = [r for r in active if not (r.sent_s <= stall_t <= _end(r))]
        active = (at_stall + rest)[:max_requests]
        active.sort(key=lambda r: r.sent_s)
    return active, (low, high)


def _end(request: TimelineRequest) -> float:
    return float(request.token_times_s[-1]) if len(request.token_times_s) else request.sent_s


@dataclass(slots=True)
class _TimelineMarks:
    """The timeline's coordinates, row by row (None breaks a line between requests)."""

    wait_x: list[float | None] = field(default_factory=list)
    wait_y: list[float | None] = field(default_factory=list)
    tok_x: list[float] = field(default_factory=list)
    tok_y: list[int] = field(default_factory=list)
    stall_x: list[float | None] = field(default_factory=list)
    stall_y: list[float | None] = field(default_factory=list)
    fail_x: list[float] = field(default_factory=list)
    fail_y: list[int] = field(default_factory=list)


def _timeline_marks(
    chosen: Sequence[TimelineRequest], low: float, high: float, slo_s: float | None
) -> _TimelineMarks:
    """Each request's wait for its first token, its tokens inside [low, high], its gaps above
    the SLO and where it failed."""
    marks = _TimelineMarks()
    for row, request in enumerate(chosen):
        times = np.asarray(request.token_times_s, dtype=np.float64)
        first = float(times[0]) if len(times) else _end(request)
        marks.wait_x += [max(request.sent_s, low), min(first, high), None]
        marks.wait_y += [row, row, None]
        inside = times[(times >= low) & (times <= high)]
        marks.tok_x += inside.tolist()
        marks.tok_y += [row] * len(inside)
        if slo_s is not None and len(times) >= 2:
            gaps = np.diff(times)
            for index in np.nonzero(gaps > slo_s)[0]:
                a, b = float(times[index]), float(times[index + 1])
                if b >= low and a <= high:
                    marks.stall_x += [a, b, None]
                    marks.stall_y += [row, row, None]
        if request.failed:
            marks.fail_x.append(min(_end(request), high))
            marks.fail_y.append(row)
    return marks


def timeline_chart(timeline: TimelineInput) -> Chart | None:
    """Tokens per request over time: one row per request, a grey bar from send to first token, a
    dot per token, and gaps above the TBT SLO in red; None without requests."""
    chosen, (low, high) = select_timeline(timeline)
    if not chosen:
        return None
    slo_s = None if timeline.slo_tbt_ms is None else timeline.slo_tbt_ms / 1e3
    marks = _timeline_marks(chosen, low, high, slo_s)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=round_sig(marks.wait_x, 6),
            y=marks.wait_y,
            mode="lines",
            line={"color": "rgba(87,96,106,0.35)", "width": 5},
            name="waiting for the first token (TTFT)",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=round_sig(marks.tok_x, 6),
            y=marks.tok_y,
            mode="markers",
            marker={"color": MEASURED_COLOR, "size": 3},
            name="output token",
            hovertemplate="t=%{x:.4f} s<extra></extra>",
        )
    )
    if marks.stall_x:
        fig.add_trace(
            go.Scatter(
                x=round_sig(marks.stall_x, 6),
                y=marks.stall_y,
                mode="lines",
                line={"color": FAIL_COLOR, "width": 3},
                name=f"gap above the TBT SLO ({format_ms(timeline.slo_tbt_ms)})",
                hoverinfo="skip",
            )
        )
    if marks.fail_x:
        fig.add_trace(
            go.Scatter(
                x=round_sig(marks.fail_x, 6),
                y=marks.fail_y,
                mode="markers",
                marker={"symbol": "x", "size": 10, "color": "black"},
                name="failed request",
            )
        )
    fig.update_layout(
        template=TEMPLATE,
        height=max(320, min(900, 14 * len(chosen) + 140)),
        margin={"l": 70, "r": 30, "t": 40, "b": 60},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
    )
    fig.update_xaxes(title_text="time since run start (s)", range=[low, high])
    fig.update_yaxes(
        title_text="request (row, by send time)",
        tickvals=list(range(len(chosen))),
        ticktext=[str(r.request_id) for r in chosen],
        autorange="reversed",
    )
    stall_t, stall_gap = _worst_gap(timeline.requests)
    caption = (
        f"{len(chosen)} of {len(timeline.requests)} requests, {high - low:.3g} s around the "
        f"longest gap between two tokens ({format_ms(stall_gap * 1e3)} ending at "
        f"{stall_t:.3g} s). "
        "Each dot is a token; a vertical white band across many rows is a stall: an iteration "
        "that carried a large prefill chunk."
    )
    if slo_s is not None:
        caption += " Red segments are gaps longer than the TBT SLO."
    return Chart("chart-timeline", timeline.title, fig, caption)


def downsample_sorted(values: npt.ArrayLike, max_points: int) -> npt.NDArray[np.float64]:
    """Evenly thin an array to at most ``max_points`` values, keeping the first and last."""
    data = np.asarray(values, dtype=np.float64)
    if len(data) <= max_points or max_points < 2:
        return data
    index = np.unique(np.round(np.linspace(0, len(data) - 1, max_points)).astype(np.int64))
    return data[index]


__all__ = [
    "arrival_rate_chart",
    "downsample_sorted",
    "select_timeline",
    "timeline_chart",
    "workload_lengths_chart",
]
