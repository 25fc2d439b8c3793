"""A stand-in for the vLLM, SGLang and TensorRT-LLM servers, written by the tests into a temporary
folder: it parses the real engine's flags (unknown ones fail like argparse does, or like click
does for trtllm-serve), records its argv, environment and (trtllm) its --config file, and serves
/health, /v1/models, /version or /server_info, /metrics (trtllm: JSON there and Prometheus text at
/prometheus/metrics) and streaming /v1/completions on 127.0.0.1. Behaviour knobs come from
STANDIN_* variables.
"""

from __future__ import annotations

from pathlib import Path

STANDIN_SOURCE = r"""
import argparse, json, os, signal, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

flavor = os.environ.get("STANDIN_FLAVOR", "sglang")
parser = argparse.ArgumentParser(prog="standin-" + flavor, allow_abbrev=flavor != "trtllm")
parser.add_argument("--host", required=True)
parser.add_argument("--port", type=int, required=True)
if flavor != "trtllm":
    parser.add_argument("--dtype")
if flavor == "trtllm":  # trtllm-serve's click options (tensorrt_llm/commands/serve.py)
    parser.add_argument("model")
    parser.add_argument("--max_num_tokens", type=int)
    parser.add_argument("--enable_chunked_prefill", action="store_true")
    parser.add_argument("--max_batch_size", type=int)
    parser.add_argument("--max_seq_len", type=int)
    parser.add_argument("--tp_size", "--tensor_parallel_size", type=int)
    parser.add_argument("--kv_cache_free_gpu_memory_fraction", "--free_gpu_memory_fraction",
                        type=float)
    parser.add_argument("--config", "--extra_llm_api_options")
    parser.add_argument("--backend", choices=["pytorch", "tensorrt", "_autodeploy"])
elif flavor == "vllm":
    parser.add_argument("serve")
    parser.add_argument("model")
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--tensor-parallel-size", type=int)
    parser.add_argument("--gpu-memory-utilization", type=float)
    parser.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--swap-space", type=int)
else:
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--chunked-prefill-size", type=int)
    parser.add_argument("--max-prefill-tokens", type=int)
    parser.add_argument("--max-running-requests", type=int)
    parser.add_argument("--context-length", type=int)
    parser.add_argument("--tp-size", type=int)
    parser.add_argument("--mem-fraction-static", type=float)
    parser.add_argument("--disable-radix-cache", action="store_true")
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--schedule-policy", choices=["lpm", "fcfs"])
if flavor == "trtllm":
    args, unknown = parser.parse_known_args()
    if unknown:  # click's wording, as trtllm-serve prints it
        print("Usage: trtllm-serve [OPTIONS] MODEL\nTry 'trtllm-serve --help' for help.\n\n"
              f"Error: No such option: {unknown[0].split('=')[0]}", flush=True)
        sys.exit(2)
else:
    args = parser.parse_args()
model = getattr(args, "model", None) or getattr(args, "model_path", None)
options_text = None
if getattr(args, "config", None):
    with open(args.config) as options:
        options_text = options.read()

child = None
if os.environ.get("STANDIN_CHILD"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if os.environ.get("STANDIN_IGNORE_SIGNALS"):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
record = os.environ.get("STANDIN_RECORD")
if record:
    with open(record, "w") as out:
        json.dump({"argv": sys.argv[1:], "pid": os.getpid(), "child": child and child.pid,
                   "env": {k: v for k, v in os.environ.items() if k.startswith("MY_")},
                   "options": options_text}, out)
print(f"standin {flavor} starting for {model}", flush=True)
if os.environ.get("STANDIN_FAIL"):
    print("RuntimeError: " + os.environ["STANDIN_FAIL"], flush=True)
    sys.exit(3)
time.sleep(float(os.environ.get("STANDIN_DELAY_S", "0")))
served = {"requests": 0, "tokens": 0}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _json(self, doc, status=200):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self._json({})
        elif self.path == "/v1/models":
            self._json({"data": [{"id": model}]})
        elif self.path == "/version" and flavor in ("vllm", "trtllm"):
            self._json({"version": "9.9.9-standin"})
        elif self.path == "/server_info" and flavor == "sglang":  # SGLang 0.5.23's path
            self._json({"version": "0.0.1-standin", "budget": args.chunked_prefill_size})
        elif self.path == "/metrics" and flavor == "trtllm":
            self._json([{"iter": 1, "numActiveRequests": 0}])  # its JSON iteration stats
        elif self.path == "/prometheus/metrics" and flavor == "trtllm":
            ok = served["requests"]
            lines = [f'trtllm_request_success_total{{finished_reason="length"}} {ok}',
                     f"trtllm_generation_tokens_total {served['tokens']}",
                     "trtllm_prompt_tokens_total 0"]
            for le, count in (("0.1", served["requests"]), ("+Inf", served["requests"])):
                lines.append(f'trtllm_time_to_first_token_seconds_bucket{{le="{le}"}} {count}')
            lines += [f"trtllm_time_to_first_token_seconds_count {served['requests']}",
                      f"trtllm_time_to_first_token_seconds_sum {0.01 * served['requests']}"]
            body = ("\n".join(lines) + "\n").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/metrics":
            body = (f"vllm:prompt_tokens_total 0\nvllm:generation_tokens_total {served['tokens']}\n"
                    f"vllm:request_success_total {served['requests']}\n").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._json({"error": "not found"}, 404)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = int(body.get("max_tokens", 16))
        if not body.get("stream"):
            served["requests"] += 1
            served["tokens"] += n
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
            self._json({"choices": [{"text": "x" * n, "finish_reason": "length"}], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(n):
            time.sleep(0.002)
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": i + 1}
            chunk = {"choices": [{"text": "x", "finish_reason": None}], "usage": usage}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        served["requests"] += 1
        served["tokens"] += n


server = ThreadingHTTPServer((args.host, args.port), Handler)
print(f"standin {flavor} listening on {args.host}:{args.port}", flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    print("standin: interrupted, stopping", flush=True)
"""


def write_standin(folder: Path) -> Path:
    """Write the stand-in server script into ``folder`` and return its path."""
    path = folder / "standin_server.py"
    path.write_text(STANDIN_SOURCE.lstrip(), encoding="utf-8")
    return path
