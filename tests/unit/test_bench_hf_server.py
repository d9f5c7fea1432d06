"""The CPU stand-in server of the throughput benchmark answers `OpenAIEngine` like the engine it wraps."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer


def test_the_hf_completion_server_batches_and_returns_the_engines_tokens():
    from coevolve.benchmarks.hf_completion_server import BatchingGenerator, make_handler
    from coevolve.llm.engine import SamplingParams
    from coevolve.llm.hf_engine import HfEngine
    from coevolve.llm.models import load_model
    from coevolve.llm.openai_engine import OpenAIEngine

    model, tokenizer = load_model("tiny-random-llama")
    engine = HfEngine(model, tokenizer, batch_size=8)
    calls = []
    generate = engine.generate
    engine.generate = lambda prompts, sampling, **kw: calls.append(len(prompts)) or generate(prompts, sampling, **kw)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(BatchingGenerator(engine, 0.2), "tiny"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = OpenAIEngine(f"http://127.0.0.1:{server.server_address[1]}/v1", "tiny", tokenizer=tokenizer,
                              token_ids=True, api_key_env=None)  # fmt: skip
        prompts = [[1, 5, 9, 13], [1, 7, 7], [1, 2, 3, 4, 5]]
        greedy = SamplingParams(greedy=True, max_new_tokens=6)
        served = client.generate(prompts, greedy)
    finally:
        server.shutdown()
    local = generate(prompts, greedy)
    assert [c.token_ids for c in served] == [c.token_ids for c in local]
    for s, c in zip(served, local, strict=True):
        assert s.logprobs == [float(x) for x in c.logprobs]
    assert calls == [3]  # the three concurrent requests were generated as one batch
