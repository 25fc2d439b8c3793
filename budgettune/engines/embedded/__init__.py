"""The embedded simulated engine: an OpenAI-compatible server whose iterations are the simulator's
scheduler and step-time model run in real time.

    config    SimServerConfig: the settings, checked once
    profiled  a profile file as the simulator's model (ProfiledModel)
    core      SimCore: iterations on the wall clock, tokens written to the streams
    http11    the minimal HTTP/1.1 server and chunked SSE writer
    app       SimApp: OpenAI-compatible routes and request validation
    server    build (config -> core + app) and serve (listen until stopped)
    cli       ``python -m budgettune.engines.embedded`` (argparse, flags as vllm serve)
    engine    SimEngine: how budgettune launches it as a subprocess
"""
