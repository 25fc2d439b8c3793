"""Layer 2: the simulator: token-budget scheduler, KV block pool, discrete-event loop."""
