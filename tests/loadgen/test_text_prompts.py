"""Text prompts that encode to exactly the scheduled tokens on the model's own tokenizer: the
tiny model's byte-level BPE, and a SentencePiece-style tokenizer that adds a BOS (as Llama's
do), both trained here; how the form is chosen per engine; the runner's bodies."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from budgettune.app.client import client_settings
from budgettune.app.requests import ClientRequest
from budgettune.app.tiny_model import corpus_lines, train_tokenizer
from budgettune.core.errors import SpecError, UserError
from budgettune.loadgen.client import Endpoint, request_body
from budgettune.loadgen.runner import RunOptions, prompt_ids, prompts_as_text
from budgettune.loadgen.text_prompts import (
    TextPrompts,
    single_token_words,
    text_prompts,
    tokenizer_file,
)
from budgettune.trace.schedule import Schedule


@pytest.fixture(scope="module")
def tiny_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the tiny model's tokenizer.json (as `budgettune tiny-model` writes it)."""
    folder = tmp_path_factory.mktemp("tiny-tokenizer")
    train_tokenizer(4096, seed=0).save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture(scope="module")
def bos_tokenizer() -> Tokenizer:
    """SentencePiece-style: words marked by a leading '▁' (Metaspace), and a BOS added to
    every text by its post-processor, as Llama 2's and Mistral's tokenizers do."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=2000, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tokenizer.train_from_iterator(corpus_lines(1), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))]
    )
    return tokenizer


def random_prompts(count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 3000, size=count)
    return [rng.integers(10, 250, size=int(n)).tolist() for n in lengths]


def test_the_tiny_models_tokenizer_encodes_every_text_to_its_scheduled_tokens(
    tiny_tokenizer_dir: Path,
) -> None:
    prompts = text_prompts(str(tiny_tokenizer_dir / "tokenizer.json"))
    assert prompts.added_tokens == 0  # the tiny tokenizer adds no BOS
    assert len(prompts.words) >= 240  # one word per id drawn (10-249)
    ids = [*random_prompts(200, seed=3), [11], [12, 13]]
    texts = prompts.texts(ids)
    # Checked here with a tokenizer loaded afresh from the file, as the server loads it.
    fresh = Tokenizer.from_file(str(tiny_tokenizer_dir / "tokenizer.json"))
    for text, want in zip(texts, ids, strict=True):
        assert len(fresh.encode(text, add_special_tokens=True).ids) == len(want)
    # The same ids make the same words: a shared prefix of ids is a shared prefix of text.
    shared = ids[0][:100]
    first, second = prompts.texts([shared + ids[1][:50], shared + ids[2][:70]])
    assert (
        first[: len(" ".join(prompts.words[t % len(prompts.words)] for t in shared))]
        == (second[: len(" ".join(prompts.words[t % len(prompts.words)] for t in shared))])
    )


def test_a_tokenizer_that_adds_a_bos_gets_one_word_fewer(bos_tokenizer: Tokenizer) -> None:
    prompts = TextPrompts(bos_tokenizer, "sp-style")
    assert prompts.added_tokens == 1
    ids = random_prompts(100, seed=5)
    for text, want in zip(prompts.texts(ids), ids, strict=True):
        encoded = bos_tokenizer.encode(text, add_special_tokens=True)
        assert encoded.tokens[0] == "<s>" and len(encoded.ids) == len(want)
    # A prompt of one token is the BOS alone: it cannot be text.
    with pytest.raises(UserError, match="cannot be text") as refused:
        prompts.texts([[20, 21], [30]])
    assert refused.value.field == "prompt_form"


def test_words_are_single_tokens_and_stay_so_when_joined(bos_tokenizer: Tokenizer) -> None:
    tiny = train_tokenizer(4096, seed=0)
    for tokenizer in (tiny, bos_tokenizer):
        words = single_token_words(tokenizer)
        joined = tokenizer.encode(" ".join(words), add_special_tokens=False)
        assert len(joined.ids) == len(words)


def test_a_tokenizer_with_too_few_words_is_refused_by_name() -> None:
    # A character-level vocabulary: no word of two letters is one token.
    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(UserError, match="has 0 words of one token") as refused:
        TextPrompts(tokenizer, "chars.json")
    assert refused.value.field == "tokenizer" and "--prompt-form ids" in (refused.value.hint or "")


def test_an_unreadable_tokenizer_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"version": "1.0"}')
    with pytest.raises(UserError, match=r"cannot read .* as a tokenizer") as refused:
        text_prompts(str(bad))
    assert refused.value.field == "tokenizer"


def test_the_tokenizer_is_found_in_a_folder_a_file_or_the_hub_cache(
    tiny_tokenizer_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tiny_tokenizer_dir / "tokenizer.json"
    assert tokenizer_file(str(tiny_tokenizer_dir)) == file
    assert tokenizer_file(str(file)) == file
    assert tokenizer_file(str(tmp_path)) is None  # a folder without one
    assert tokenizer_file("org/not-cached") is None
    # A model id in Hugging Face's cache layout: models--org--name/snapshots/<revision>/.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = tmp_path / "hub" / "models--org--model" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer.json").write_bytes(file.read_bytes())
    assert tokenizer_file("org/model") == snapshot / "tokenizer.json"


def test_the_form_is_text_where_the_engine_has_the_models_tokenizer(
    tiny_tokenizer_dir: Path,
) -> None:
    found = str(tiny_tokenizer_dir / "tokenizer.json")
    auto = client_settings(ClientRequest())
    for engine in ("vllm", "sglang"):
        decided = auto.for_engine(engine, str(tiny_tokenizer_dir))
        assert (decided.prompt_form, decided.tokenizer) == ("text", found)
        assert (
            decided.run_options(
                request_timeout="10s", max_error_rate=None, seed=0, warmup=0
            ).prompt_form
            == "text"
        )
    # The embedded engine, a server you run, a model id not in the cache: ids.
    for engine, model in (("sim", None), ("external", str(tiny_tokenizer_dir)), ("vllm", "a/b")):
        assert auto.for_engine(engine, model).prompt_form == "ids"
    # --tokenizer makes text for any engine; --prompt-form ids sends ids whatever the model.
    given = client_settings(ClientRequest(tokenizer=str(tiny_tokenizer_dir)))
    assert given.for_engine("external", None).tokenizer == found
    ids = client_settings(ClientRequest(prompt_form="ids"))
    assert ids.for_engine("vllm", str(tiny_tokenizer_dir)).prompt_form == "ids"
    # The chat API's messages are text whatever the form.
    chat = client_settings(ClientRequest(endpoint="chat", prompt_form="ids"))
    assert chat.for_engine("vllm", str(tiny_tokenizer_dir)).prompt_form == "text"
    assert json.dumps(auto.for_engine("vllm", str(tiny_tokenizer_dir)).to_json())


@pytest.mark.parametrize(
    ("request_", "engine", "field", "message"),
    [
        (ClientRequest(prompt_form="words"), "vllm", "prompt_form", "unknown prompt form"),
        (ClientRequest(prompt_form="ids", tokenizer="x"), "vllm", "tokenizer", "need no tokenizer"),
        (ClientRequest(prompt_form="text"), "sim", "prompt_form", "need the model's tokenizer"),
        (ClientRequest(tokenizer="/nowhere/at/all"), "vllm", "tokenizer", "no tokenizer.json at"),
    ],
)
def test_a_form_that_cannot_be_sent_is_refused_by_name(
    request_: ClientRequest, engine: str, field: str, message: str
) -> None:
    with pytest.raises(SpecError, match=message) as refused:
        client_settings(request_).for_engine(engine, "org/uncached")
    assert refused.value.field == field


def test_the_runner_sends_text_in_completions_bodies(tiny_tokenizer_dir: Path) -> None:
    schedule = Schedule(np.array([0.0, 0.1, 0.2]), np.array([5, 700, 64]), np.array([4, 4, 4]))
    options = RunOptions(tokenizer=str(tiny_tokenizer_dir / "tokenizer.json"), seed=2)
    texts = prompts_as_text(schedule, options)
    assert texts is not None and len(texts) == 3
    fresh = Tokenizer.from_file(str(tiny_tokenizer_dir / "tokenizer.json"))
    assert [len(fresh.encode(t).ids) for t in texts] == [5, 700, 64]
    body = json.loads(request_body(Endpoint.COMPLETIONS, "m", texts[1], 4))
    assert body["prompt"] == texts[1]
    # Without a tokenizer, and on the chat API, prompts stay ids (chat makes its own words).
    assert prompts_as_text(schedule, RunOptions()) is None
    chat = RunOptions(tokenizer=options.tokenizer, endpoint=Endpoint.CHAT)
    assert prompts_as_text(schedule, chat) is None
    ids = json.loads(request_body(Endpoint.COMPLETIONS, "m", prompt_ids(schedule, 0, options), 4))
    assert len(ids["prompt"]) == 5


def test_a_replay_sends_text_and_says_what_the_server_counted(
    budgettune_cmd: list[str], tiny_tokenizer_dir: Path, tmp_path: Path
) -> None:
    """On the embedded engine, which counts a text prompt as a token per 4 bytes and not with
    the tokenizer: results record the form, and the server's count is compared request by
    request, in the same words whatever it found."""
    from budgettune.artifacts.results import load_results
    from budgettune.engines.embedded.validate import text_token_count

    out = tmp_path / "run"
    done = subprocess.run(
        [*budgettune_cmd, "replay", "--engine", "sim", "--budget", "512", "--rate", "20",
         "--requests", "8", "--prompt-dist", "uniform:min=50,max=400", "--output-dist", "fixed:4",
         "--seed", "4", "--prompt-form", "text", "--tokenizer", str(tiny_tokenizer_dir),
         "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = load_results(out)
    file = str(tiny_tokenizer_dir / "tokenizer.json")
    assert (results.config["prompt_form"], results.config["tokenizer"]) == ("text", file)
    check = results.points[0]["selfcheck"]
    assert check["prompt_form"] == "text" and check["prompt_tokens"]["checked"] == 8
    # What the embedded engine counts for the very texts sent (made again from the same seed).
    lengths = [r["prompt_tokens"] for r in results.points[0]["records"]]
    schedule = Schedule(np.arange(8) * 0.05, np.array(lengths), np.full(8, 4))
    texts = prompts_as_text(schedule, RunOptions(tokenizer=file, seed=4))
    assert texts is not None
    off = sum(text_token_count(t) != n for t, n in zip(texts, lengths, strict=True))
    assert check["prompt_tokens"]["off"] == off > 0
    stdout = " ".join(done.stdout.split())
    assert f"prompts: text, tokenized by the server, {8 - off} of 8 as long as scheduled" in stdout
    assert f"server counted another prompt length than scheduled for {off} of 8" in done.stderr
    assert "text, tokenized by the server" in (out / "report.html").read_text()
