"""A "vLLM" for sweep tests: the embedded sim server behind vLLM's command line (a script that
passes vLLM's flags on, so every request is served in real time by the modeled GPU)."""

# vLLM's command line onto the sim server; FAKE_VLLM_CRASH_AFTER=N SIGKILLs the server once it
# has served N requests (read from its own /metrics), as an engine dying mid-profile would.
FAKE_VLLM = """
    import os, signal, sys, threading, time, runpy, urllib.request
    args = [a for a in sys.argv[1:] if a not in ("--no-enable-prefix-caching",)]
    crash_after = int(os.environ.get("FAKE_VLLM_CRASH_AFTER", "0"))

    def served(port):
        url = f"http://127.0.0.1:{port}/metrics"
        text = urllib.request.urlopen(url, timeout=2).read().decode()
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("vllm:request_success_total"))

    def watch(port):
        while True:
            time.sleep(0.1)
            try:
                if served(port) >= crash_after:
                    os.kill(os.getpid(), signal.SIGKILL)
            except OSError:
                pass

    if crash_after:
        port = args[args.index("--port") + 1]
        threading.Thread(target=watch, args=(port,), daemon=True).start()
    if os.environ.get("FAKE_VLLM_STARTS"):  # one line per start: pid, budget, max-num-seqs
        with open(os.environ["FAKE_VLLM_STARTS"], "a") as starts:
            budget = args[args.index("--max-num-batched-tokens") + 1]
            seqs = args[args.index("--max-num-seqs") + 1] if "--max-num-seqs" in args else "-"
            starts.write(f"{os.getpid()} {budget} {seqs}\\n")
    sys.argv = ["sim_server", *args]
    runpy.run_module("budgettune.engines.embedded", run_name="__main__")
"""
