"""The simulator: roofline step-time model, token-budget scheduler, discrete-event loop."""
