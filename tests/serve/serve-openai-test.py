"""Starts the real `impress serve` on a free loopback port with a temporary store and the default
model, and drives it with the official openai client: chat (plain and streamed), completions,
models, usage, the store's reuse of a long document (also after a restart), every bad input's
status and error body, /metrics against the requests made, and a bounded load test.

Usage: serve-openai-test.py IMPRESS_BINARY ASSETS_DIR   (exit 0 = pass)
"""
import concurrent.futures
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import openai
from prometheus_client.parser import text_string_to_metric_families

BIN, ASSETS = sys.argv[1], sys.argv[2]
KEY = "test-key"
MAX_BODY_MB = 0.1  # 104857 bytes


class Server:
    def __init__(self, store, extra=()):
        self.proc = subprocess.Popen(
            [BIN, "serve", "--port", "0", "--store", store, "--api-key", KEY, "--max-queue", "4",
             "--max-body-mb", str(MAX_BODY_MB), "--threads", "2", "--log-level", "warn", *extra],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert "http://127.0.0.1:" in line, f"no address line: {line!r}"
        self.base = line.split(" on ")[1].split()[0]  # http://127.0.0.1:PORT/v1
        self.root = self.base[: -len("/v1")]
        self.client = openai.OpenAI(base_url=self.base, api_key=KEY, max_retries=0, timeout=120)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=60)
        assert rc == 0, f"server exited with {rc}"


def http(method, url, body=None, key=KEY, raw=None):
    """(status, parsed JSON or text) of one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def metrics(srv):
    status, text = http("GET", srv.root + "/metrics")
    assert status == 200
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def requests_total(m, endpoint, status):
    return m.get(("impress_requests_total", (("endpoint", endpoint), ("status", str(status)))), 0)


def expect_error(status_body, status, code=None, param=None, contains=()):
    got, body = status_body
    assert got == status, f"status {got}, want {status}: {body}"
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["message"], err
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err
    for c in contains:
        assert c in err["message"], err


def basics(srv, model_id):
    c = srv.client
    models = c.models.list()
    assert [m.id for m in models.data] == [model_id]
    msgs = [{"role": "user", "content": "Name three colours."}]
    # Plain and streamed text agree at temperature 0. Both recompute their prompt (system recomp):
    # a prefix reused from the store under IMPRESS attends to a selection of its tokens, so the
    # second request could differ from the first for that reason alone.
    recomp = {"impress": {"system": "recomp"}}
    plain = c.chat.completions.create(model=model_id, messages=msgs, max_tokens=24, temperature=0, extra_body=recomp)
    text = plain.choices[0].message.content
    assert text and plain.choices[0].finish_reason in ("stop", "length")
    assert plain.usage.prompt_tokens > 0 and 0 < plain.usage.completion_tokens <= 24
    assert plain.usage.total_tokens == plain.usage.prompt_tokens + plain.usage.completion_tokens
    chunks = list(c.chat.completions.create(model=model_id, messages=msgs, max_tokens=24, temperature=0,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body=recomp))
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == text, (streamed, text)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finish == [plain.choices[0].finish_reason]
    # The same prompt twice more: the second takes its prefix (the system prompt) from the store.
    c.chat.completions.create(model=model_id, messages=msgs, max_tokens=24, temperature=0)
    again = c.chat.completions.create(model=model_id, messages=msgs, max_tokens=24, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    short = c.chat.completions.create(model=model_id, messages=msgs, max_tokens=2, temperature=0)
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 2
    comp = c.completions.create(model=model_id, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert comp.choices[0].text and comp.usage.completion_tokens <= 6
    stop = c.completions.create(model=model_id, prompt="Count: 1, 2, 3,", max_tokens=30, temperature=0, stop=[","])
    assert "," not in stop.choices[0].text and stop.choices[0].finish_reason == "stop", stop.choices[0]
    return 5  # chat completions that returned 200: plain, streamed, two again, short


def document_request(srv, doc, question):
    r = srv.client.chat.completions.create(
        model="impress", max_tokens=8, temperature=0,
        messages=[{"role": "system", "content": "Answer from this document.\n\n" + doc},
                  {"role": "user", "content": question}],
        extra_body={"impress": {"report": True}})
    report = r.model_extra["impress_report"]
    return r.usage, report


def bad_inputs(srv, doc):
    url = srv.root + "/v1/chat/completions"
    ok = [{"role": "user", "content": "hi"}]
    # The worker finishes the last answer's store write before it checks the store.
    status, health = http("GET", srv.root + "/health?check=store")
    assert status == 200 and health["store"]["consistent"], health
    before = metrics(srv)
    expect_error(http("POST", url, raw=b'{"messages": ['), 400, "invalid_json")
    expect_error(http("POST", url, {"model": "impress"}), 400, "missing_required_parameter", "messages")
    expect_error(http("POST", url, {"messages": [{"role": "user", "content": 3}]}), 400, "invalid_type",
                 "messages[0].content")
    expect_error(http("POST", url, {"messages": ok, "max_tokens": 0}), 400, "invalid_value", "max_tokens")
    expect_error(http("POST", url, {"messages": ok, "max_tokens": -1}), 400, "invalid_value", "max_tokens")
    expect_error(http("POST", url, {"messages": ok, "temperature": "x"}), 400, "invalid_type", "temperature")
    expect_error(http("POST", url, {"messages": ok, "model": "gpt-4o"}), 404, "model_not_found", "model")
    expect_error(http("POST", url, {"messages": ok}, key=None), 401, "invalid_api_key")
    expect_error(http("POST", url, {"messages": ok}, key="wrong"), 401, "invalid_api_key")
    expect_error(http("GET", srv.root + "/v1/models", key="wrong"), 401, "invalid_api_key")
    expect_error(http("POST", url, raw=json.dumps({"messages": [{"role": "user", "content": "x" * 200_000}]}).encode()),
                 413, "request_too_large")
    long_prompt = (doc + "\n") * 5  # past 8192 tokens, under the body limit
    assert len(long_prompt.encode()) < MAX_BODY_MB * (1 << 20), len(long_prompt)
    status_body = http("POST", url, {"messages": [{"role": "user", "content": long_prompt}]})
    expect_error(status_body, 400, "context_length_exceeded", contains=("8192",))
    n_prompt = [w for w in status_body[1]["error"]["message"].split() if w.isdigit()]
    assert len(n_prompt) == 2 and int(n_prompt[0]) > 8192, status_body
    # The official client sees the same errors.
    try:
        srv.client.chat.completions.create(model="nope", messages=ok)
        raise AssertionError("unknown model accepted")
    except openai.NotFoundError as e:
        assert e.status_code == 404
    after = metrics(srv)
    # Nothing of a failed request reached the model or the store.
    for name in ("impress_store_tokens", "impress_completion_tokens_total"):
        assert after[(name, ())] == before[(name, ())], name
    assert requests_total(after, "/v1/chat/completions", 400) - requests_total(before, "/v1/chat/completions", 400) == 7
    assert requests_total(after, "/v1/chat/completions", 401) - requests_total(before, "/v1/chat/completions", 401) == 2
    assert requests_total(after, "/v1/chat/completions", 404) - requests_total(before, "/v1/chat/completions", 404) == 2
    assert requests_total(after, "/v1/chat/completions", 413) - requests_total(before, "/v1/chat/completions", 413) == 1


def load_test(srv):
    """8 clients x 25 requests: plain, streamed, cancelled mid-stream, bad. No 5xx but 503."""
    statuses, latencies, lock = [], [], threading.Lock()

    def client_run(seed):
        rnd = random.Random(seed)
        c = openai.OpenAI(base_url=srv.base, api_key=KEY, max_retries=0, timeout=120)
        for i in range(25):
            kind = rnd.choice(["plain", "plain", "stream", "cancel", "bad"])
            msgs = [{"role": "user", "content": f"Say a word about the number {seed * 100 + i}."}]
            t0 = time.perf_counter()
            status = 200
            try:
                if kind == "plain":
                    c.chat.completions.create(model="impress", messages=msgs, max_tokens=4)
                elif kind == "stream":
                    for _ in c.chat.completions.create(model="impress", messages=msgs, max_tokens=4, stream=True):
                        pass
                elif kind == "cancel":
                    s = c.chat.completions.create(model="impress", messages=msgs, max_tokens=64, stream=True)
                    next(iter(s))
                    s.close()
                else:
                    c.chat.completions.create(model="impress", messages=msgs, max_tokens=0)
            except openai.APIStatusError as e:
                status = e.status_code
                if status == 503:
                    assert e.response.headers.get("retry-after") == "1", e.response.headers
                    assert e.body["code"] == "overloaded", e.body
            with lock:
                statuses.append((kind, status))
                latencies.append(time.perf_counter() - t0)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(client_run, range(8)))
    assert len(statuses) == 200
    bad_5xx = [s for s in statuses if s[1] >= 500 and s[1] != 503]
    assert not bad_5xx, bad_5xx
    assert all(s == 400 for k, s in statuses if k == "bad"), statuses
    assert all(s in (200, 503) for k, s in statuses if k != "bad"), statuses
    latencies.sort()
    n503 = sum(1 for _, s in statuses if s == 503)
    print(f"load: 200 requests, {n503} x 503, p50 {latencies[100] * 1000:.0f} ms, "
          f"p99 {latencies[197] * 1000:.0f} ms (cpu: {cpu_model()})")
    assert srv.proc.poll() is None, "the server died"
    status, health = http("GET", srv.root + "/health?check=store")
    assert status == 200 and health["store"]["consistent"], health


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


def main():
    with open(os.path.join(ASSETS, "docs", "gpl-3.0.txt")) as f:
        doc = f.read()[:9000]  # about 2000 tokens
    with tempfile.TemporaryDirectory() as store:
        srv = Server(store)
        try:
            model_id = srv.client.models.list().data[0].id
            n_chat_ok = basics(srv, model_id)
            cold_usage, cold = document_request(srv, doc, "What is this document about?")
            warm_usage, warm = document_request(srv, doc, "Who may copy it?")
            n_doc = cold["n_prefix"]
            assert n_doc > 1500, cold
            assert cold_usage.prompt_tokens_details.cached_tokens < 0.5 * n_doc, cold_usage
            assert warm_usage.prompt_tokens_details.cached_tokens >= 0.95 * n_doc, (warm_usage, n_doc)
            assert warm["ttft_ms"] < cold["ttft_ms"], (warm["ttft_ms"], cold["ttft_ms"])
            print(f"document of {n_doc} prefix tokens: TTFT cold {cold['ttft_ms']:.0f} ms, "
                  f"warm {warm['ttft_ms']:.0f} ms (cpu: {cpu_model()}, machine shared)")
            bad_inputs(srv, doc)
            m = metrics(srv)
            assert requests_total(m, "/v1/chat/completions", 200) == n_chat_ok + 2, m
            assert requests_total(m, "/v1/completions", 200) == 2
            assert requests_total(m, "/v1/models", 200) == 2
            assert m[("impress_ttft_seconds_count", ())] == n_chat_ok + 2 + 2
            assert m[("impress_prompt_tokens_total", (("kind", "cached"),))] >= warm_usage.prompt_tokens_details.cached_tokens
            assert m[("impress_store_tokens", ())] > n_doc
            # Every answer's KV was written: the document request stored its ~2000 new tokens.
            assert m[("impress_store_written_tokens_total", ())] > n_doc
            assert m[("impress_store_written_bytes_total", ())] > 0
            load_test(srv)
        finally:
            srv.stop()
        # After a restart the document's KV is still there.
        srv = Server(store)
        try:
            usage, report = document_request(srv, doc, "What is this document about?")
            assert usage.prompt_tokens_details.cached_tokens >= 0.95 * n_doc, (usage, n_doc)
            assert report["ttft_ms"] < cold["ttft_ms"], (report["ttft_ms"], cold["ttft_ms"])
        finally:
            srv.stop()
    print("serve-openai-test: pass")


if __name__ == "__main__":
    main()
