"""Layer 0: what every stage shares. Errors, units, GPU and model presets, per-request records,
latency metrics, the SLO judgement, the engines' default budgets, JSON at the file boundary."""
