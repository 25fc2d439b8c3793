"""A failure inside any of a replay's background tasks ends the replay at once, with that
failure's message: the sender (which builds each request), each request's stream task and the
callback that records it. Unread, such a failure left the replay waiting forever."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from test_send_timing import Seen, _Server  # a bare socket server answering one token

from budgettune.core.errors import BudgettuneError, UserError
from budgettune.loadgen import runner
from budgettune.loadgen.runner import RunOptions, Target, run_schedule
from budgettune.trace.schedule import Schedule

REQUESTS = 6
HANG_GUARD_S = 60.0  # far above the replay's ~0.1 s: reached only by a replay that never ends


def _replay() -> None:
    schedule = Schedule(
        target_s=np.linspace(0.0, 0.1, REQUESTS),
        prompt_tokens=np.full(REQUESTS, 8, dtype=np.int64),
        output_tokens=np.ones(REQUESTS, dtype=np.int64),
    )

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Server(Seen()), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            target = Target(f"http://127.0.0.1:{port}", "m")
            options = RunOptions(scrape_metrics=False)
            await asyncio.wait_for(run_schedule(schedule, target, options), HANG_GUARD_S)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def _third_call_raises(real: Callable[..., Any], error: BaseException) -> Callable[..., Any]:
    calls = iter(range(REQUESTS * 2))

    if asyncio.iscoroutinefunction(real):  # raise inside the task, not where it is created

        async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
            if next(calls) == 2:
                raise error
            return await real(*args, **kwargs)

        return wrapped_async

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if next(calls) == 2:
            raise error
        return real(*args, **kwargs)

    return wrapped


def test_a_working_replay_ends_on_its_own() -> None:
    _replay()  # the control: the failures below are the injected ones, not the server's


@pytest.mark.parametrize(
    ("task", "name", "error", "message"),
    [
        # the sender: a prompt too large to build (10^12 tokens raised MemoryError there)
        ("sender", "prompt_ids", MemoryError(), "the load generator failed: MemoryError"),
        # a request's stream task raising instead of returning its result
        ("stream", "stream_completion", RuntimeError("boom"), "failed: RuntimeError: boom"),
        # the callback that records a finished request
        ("callback", "_to_live", ValueError("bad record"), "failed: ValueError: bad record"),
    ],
)
def test_a_failing_background_task_ends_the_replay_with_its_message(
    task: str, name: str, error: BaseException, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, name, _third_call_raises(getattr(runner, name), error))
    with pytest.raises(BudgettuneError) as caught:  # a hang ends in TimeoutError instead
        _replay()
    assert message in str(caught.value), (task, str(caught.value))


def test_budgettunes_own_error_in_a_task_is_raised_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refusal = UserError("prompt 3 is over the limit", field="prompt_tokens")
    monkeypatch.setattr(runner, "prompt_ids", _third_call_raises(runner.prompt_ids, refusal))
    with pytest.raises(UserError) as caught:
        _replay()
    assert caught.value is refusal
