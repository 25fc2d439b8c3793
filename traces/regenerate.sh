#!/usr/bin/env bash
# Regenerates the synthetic traces shipped in traces/ (run from the repository root).
# Every draw is seeded: the output is byte-for-byte the same on every machine.
set -euo pipefail

# chat-like: short-to-medium prompts, a few shared system prompts, Poisson arrivals
budgettune trace synth --prompt-dist lognormal:mean=800,sigma=1.0,max=8192 --output-dist lognormal:mean=250,sigma=0.9,max=2048 --rate 8 --requests 1000 --prefix-groups 4 --prefix-tokens 256 --seed 0 -o traces/chat.jsonl

# RAG-like: long retrieved documents, short answers, one shared instruction block, bursty arrivals
budgettune trace synth --prompt-dist lognormal:mean=6000,sigma=0.5,min=1000,max=30000 --output-dist lognormal:mean=200,sigma=0.7,max=1024 --rate 1.5 --arrivals gamma --burstiness 0.5 --requests 500 --prefix-groups 1 --prefix-tokens 1024 --seed 0 -o traces/rag.jsonl
