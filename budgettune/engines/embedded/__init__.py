"""The embedded simulated engine: an OpenAI-compatible server whose iterations are the simulator's
scheduler and step-time model run in real time.

    config    SimServerConfig: the settings, checked once
    profiled  a profile file as the simulator's model (ProfiledModel)
    core      SimCore: iterations on the wall clock, tokens written to the streams
    http11    HTTP/1.1 on asyncio streams through h11: limits, timeouts, Exchange (one answer)
    wire      the answer bytes of /v1/completions and /v1/chat/completions, as vLLM's
    validate  request bodies -> Completion, prompt token counts, vLLM-worded errors
    app       SimApp: OpenAI-compatible routes and the API key
    server    build (config -> core + app) and serve (listen until stopped)
    cli       ``python -m budgettune.engines.embedded`` (argparse, flags as vllm serve)
    engine    SimEngine: how budgettune launches it as a subprocess
"""
