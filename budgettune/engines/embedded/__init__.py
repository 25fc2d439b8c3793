"""The embedded simulated engine: an OpenAI-compatible server whose iterations are the simulator's
scheduler and step-time model run in real time."""
