"""The load generator's account of its own accuracy over one run (the replay's ``selfcheck``):
a type read by attribute by the CLI and the sweep, written to JSON only by
:meth:`SelfCheck.to_json`. No numpy here: :meth:`RunOutcome.selfcheck` computes it."""

from __future__ import annotations

from dataclasses import dataclass

from budgettune.loadgen.machine_speed import SPEED_CHANGE_RATIO, speed_change

# The client's health, one rule for every command that measures (replay, sweep): past any of
# these the latencies it measured include its own delay, and a sweep replays the budget again.
LAG_WARN_MS = 5.0  # send lag p99: requests left this late
RATE_TOLERANCE = 0.02  # achieved open-loop send rate off the schedule's by more than this
CPU_SATURATED_SHARE = 0.9  # the client's process busy this share of the run's wall time


PROMPT_FORM_WORDS = {
    "text": "text, tokenized by the server",
    "ids": "token ids (no tokenizer work)",
}


def prompts_text(form: str, checked: int, off: int) -> str:
    """What the prompts were sent as, in words, and, where the server reported its count for
    ``checked`` requests, how many of them it found as long as scheduled (``off`` were not): the
    replay's summary line and the report's fact."""
    line = PROMPT_FORM_WORDS.get(form, form)
    if checked:
        line += f", {checked - off} of {checked} as long as scheduled by the server's count"
    return line


def prompt_length_sentence(off: object, checked: object, form: str) -> str:
    """The warning for ``off`` of ``checked`` requests whose server counted another prompt
    length than scheduled (a replay's, or a sweep point's saved self-check)."""
    return (
        f"the server counted another prompt length than scheduled for {off} of {checked} "
        f"requests (prompts sent as {form}): the traffic replayed is not the traffic asked"
    )


@dataclass(slots=True, frozen=True)
class LagStats:
    """p50, p99 and max of a lateness in milliseconds; all None when nothing was measured."""

    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None

    def to_json(self) -> dict[str, float | None]:
        return {"p50": self.p50_ms, "p99": self.p99_ms, "max": self.max_ms}


@dataclass(slots=True, frozen=True)
class SelfCheck:
    """Achieved vs target rate; send lag (request on the socket - its target time) and, within
    it, the timer's own lateness (the machine's share); stream chunks that carried several
    tokens (``merged_chunks_warning``: more than the share the TBT figures tolerate).
    ``concurrency``: the closed loop's requests in flight (no target rate then; a request's
    target is when its slot freed), None for an open-loop replay."""

    scheduled: int
    sent: int
    target_rate_per_s: float | None
    achieved_rate_per_s: float | None
    send_lag: LagStats
    timer_lateness: LagStats
    chunks: int
    merged_chunks: int
    merged_chunk_share: float
    merged_chunks_mode: str
    merged_chunks_warning: bool
    complete: bool
    stop_reason: str | None
    duration_s: float
    concurrency: int | None = None
    client_cpu_share: float | None = None  # the client process's CPU time / the run's wall time
    machine_ref_before_ms: float | None = None  # machine_speed.reference_ms before the run
    machine_ref_after_ms: float | None = None  # and after it
    prompt_form: str = "ids"  # what the prompts were sent as: text or (token) ids
    content_salt: int = 0  # the run's prompt-content salt (RunOptions.content_salt)
    # Completions requests whose server reported usage.prompt_tokens, and of them how many it
    # counted otherwise than scheduled (the prompts' lengths, checked by the server).
    prompt_tokens_checked: int = 0
    prompt_tokens_off: int = 0

    def health_warnings(self) -> tuple[str, ...]:
        """What was wrong with the load generator itself during the run, one sentence each
        (empty: healthy): requests sent late, the send rate off the schedule's (open loop,
        whole runs), the client's CPU saturated, the machine's speed changed during the run."""
        found = []
        lag_p99 = self.send_lag.p99_ms
        if lag_p99 is not None and lag_p99 > LAG_WARN_MS:
            timer_p99 = self.timer_lateness.p99_ms or 0.0
            found.append(
                f"requests went out late (send lag p99 {lag_p99:.1f} ms, of which the timer "
                f"itself woke {timer_p99:.1f} ms late): this machine is busy"
            )
        target, achieved = self.target_rate_per_s, self.achieved_rate_per_s
        if (
            self.concurrency is None
            and self.complete
            and target
            and achieved is not None
            and abs(achieved / target - 1.0) > RATE_TOLERANCE
        ):
            found.append(
                f"the load generator sent {achieved:.3g} req/s against the schedule's "
                f"{target:.3g} ({achieved / target - 1.0:+.1%})"
            )
        share = self.client_cpu_share
        if share is not None and share > CPU_SATURATED_SHARE:
            found.append(
                f"the load generator's CPU was saturated ({share:.0%} of a core over the run): "
                "its timings include its own queueing"
            )
        before, after = self.machine_ref_before_ms, self.machine_ref_after_ms
        change = speed_change(before, after)
        if change is not None and change > SPEED_CHANGE_RATIO:
            found.append(
                f"the machine's speed changed during the run (a fixed reference loop took "
                f"{before:.1f} ms before and {after:.1f} ms after, x{change:.2f}): its latencies "
                "mix two speeds"
            )
        return tuple(found)

    def prompt_length_warning(self) -> str | None:
        """The sentence when the server counted other prompt lengths than scheduled (a
        tokenizer that is not the server's, a BOS it adds): not the client's health, so not
        in :meth:`health_warnings` (measuring again would not change it). None when it agreed."""
        if not self.prompt_tokens_off:
            return None
        return prompt_length_sentence(
            self.prompt_tokens_off, self.prompt_tokens_checked, self.prompt_form
        )

    def to_json(self) -> dict[str, object]:
        """The ``selfcheck`` record of results.json and points.jsonl (key names as written since
        the first release)."""
        return {
            "scheduled": self.scheduled,
            "sent": self.sent,
            "target_rate_per_s": self.target_rate_per_s,
            "achieved_rate_per_s": self.achieved_rate_per_s,
            "send_lag_ms": self.send_lag.to_json(),
            "timer_lateness_ms": self.timer_lateness.to_json(),
            "chunks": self.chunks,
            "merged_chunks": self.merged_chunks,
            "merged_chunk_share": self.merged_chunk_share,
            "merged_chunks_mode": self.merged_chunks_mode,
            "merged_chunks_warning": self.merged_chunks_warning,
            "complete": self.complete,
            "stop_reason": self.stop_reason,
            "duration_s": self.duration_s,
            "concurrency": self.concurrency,
            "client_cpu_share": self.client_cpu_share,
            "machine_ref_ms": {
                "before": self.machine_ref_before_ms,
                "after": self.machine_ref_after_ms,
            },
            "prompt_form": self.prompt_form,
            "content_salt": self.content_salt,
            "prompt_tokens": {
                "checked": self.prompt_tokens_checked,
                "off": self.prompt_tokens_off,
            },
            "client_warnings": list(self.health_warnings()),
        }
