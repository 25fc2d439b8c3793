"""The traffic the SGLang tests time, and its figures: episodes of a few decoders with long
outputs, then one long prompt that arrives while they decode. From the records of such a run
(measured or simulated): each long prompt's TTFT and the decoders' longest gap while it was
prefilled (from its send to its first token)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from budgettune.core.records import RequestRecord
from budgettune.model.profile import load_profile, profile_step_model
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.simulator import simulate
from budgettune.trace.schedule import Schedule


@dataclass(slots=True, frozen=True)
class EpisodeFigures:
    """Per measured episode (the first one warms up and is left out), in seconds."""

    ttft_s: list[float]
    gap_s: list[float]

    @property
    def ttft_median_s(self) -> float:
        return float(np.median(self.ttft_s))

    @property
    def gap_median_s(self) -> float:
        return float(np.median(self.gap_s))

    @property
    def gap_share(self) -> float:
        """The decoders' longest gap as a share of the prompt's TTFT (medians): about one
        iteration's share when decodes ride along with the chunks, about 1 when they wait for
        all of them. Free of the step-time model's scale, so it tells the policies apart even
        where the simulated times are off."""
        return self.gap_median_s / self.ttft_median_s

    def line(self) -> str:
        ttft = [round(t * 1e3) for t in self.ttft_s]
        return f"TTFT ms {ttft}; longest decoder gap ms {[round(g * 1e3) for g in self.gap_s]}"


@dataclass(slots=True, frozen=True)
class Episodes:
    decoders: int
    decoder_prompt: int
    decoder_output: int
    long_prompt: int
    long_output: int
    long_after_s: float
    count: int
    spacing_s: float

    def schedule(self) -> Schedule:
        target, prompt, output = [], [], []
        for episode in range(self.count):
            start = episode * self.spacing_s
            target += [start + 0.02 * i for i in range(self.decoders)]
            target.append(start + self.long_after_s)
            prompt += [self.decoder_prompt] * self.decoders + [self.long_prompt]
            output += [self.decoder_output] * self.decoders + [self.long_output]
        return Schedule(np.array(target), np.array(prompt), np.array(output))

    def trace_rows(self) -> list[dict[str, float]]:
        """The schedule as trace rows (arrival_s, prompt_tokens, output_tokens)."""
        s = self.schedule()
        return [
            {"arrival_s": float(t), "prompt_tokens": int(p), "output_tokens": int(o)}
            for t, p, o in zip(s.target_s, s.prompt_tokens, s.output_tokens, strict=True)
        ]

    def figures(self, records: list[RequestRecord]) -> EpisodeFigures:
        """The figures of ``records`` in schedule order."""
        ttfts, gaps = [], []
        size = self.decoders + 1
        for episode in range(1, self.count):
            group = records[episode * size : (episode + 1) * size]
            long = group[self.decoders]
            start, first = long.sent_s, float(long.token_times_s[0])
            ttfts.append(first - start)
            worst = 0.0
            for dec in group[: self.decoders]:
                times = np.asarray(dec.token_times_s)
                overlap = (times[1:] > start) & (times[:-1] < first)
                if overlap.any():
                    worst = max(worst, float(np.diff(times)[overlap].max()))
            gaps.append(worst)
        return EpisodeFigures(ttfts, gaps)

    def simulated(self, profile: Path, budget: int, *, beside: bool) -> EpisodeFigures:
        """The simulator's figures, with the step-time model ``profile`` calibrates and decodes
        beside prompt chunks (``beside``: vLLM's rule, SGLang's --enable-mixed-chunk) or apart
        from them (SGLang's default)."""
        config = SchedulerConfig(
            budget_tokens=budget, kv_capacity_blocks=65536 // 16, max_num_seqs=16,
            decodes_beside_prefill=beside,
        )  # fmt: skip
        model = profile_step_model(load_profile(profile))
        return self.figures(simulate(self.schedule(), model, config).records)


def relative_error(predicted_s: float, measured_s: float) -> float:
    return abs(predicted_s / measured_s - 1.0)
