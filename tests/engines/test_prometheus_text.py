"""The sim engine's /metrics text parses with prometheus_client, whatever the model's name."""

from __future__ import annotations

from budgettune.engines.prometheus import EngineMetrics
from budgettune.loadgen.server_metrics import parse_prometheus, sample_labels


def test_model_name_with_quotes_backslashes_and_newline_round_trips() -> None:
    name = 'C:\\models\\say "hi"\nv2'
    metrics = EngineMetrics(name)
    metrics.observe_gap(0.012)
    metrics.generation_tokens = 7
    text = metrics.render()
    assert sample_labels(text, "vllm:generation_tokens_total") == {"model_name": name}
    snapshot = parse_prometheus(text)
    assert snapshot.counters["vllm:generation_tokens_total"] == 7.0
    itl = snapshot.histograms["vllm:inter_token_latency_seconds"]
    assert itl.count == 1.0 and itl.cumulative[:2] == (0.0, 1.0)  # in (10, 25] ms
