"""Layer 3 (beside loadgen): engines: launch, health, stop, by process group; vLLM, SGLang, an
external server, and the embedded simulated engine."""
