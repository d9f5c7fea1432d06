"""A CPU stand-in for a vLLM policy server, for throughput benchmarks: `HfEngine` behind `/v1/completions`.

    coevolve bench hf-completion-server --model tiny-random-llama --port 8100 --threads 1

Answers what `llm.openai_engine.OpenAIEngine` sends to vLLM: token-id prompts, `token_id:N` tokens and
per-token log-probs back, `stop_token_ids`, `GET /v1/models`. Requests that arrive together are generated
together: a worker thread takes everything queued (waiting `--gather-ms` for more) and runs one
`HfEngine.generate` per distinct set of sampling parameters, as a serving engine batches concurrent
requests. It is not a product: no LoRA endpoints, no prefix cache, no streaming; the policy path on GPUs
is vLLM (`coevolve engine serve`). `coevolve bench served-rollout` starts several of these. A tool, not
a benchmark: it records no result.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

from coevolve.benchmarks.suite import argument_parser
from coevolve.llm.engine import SamplingParams
from coevolve.llm.hf_engine import HfEngine
from coevolve.llm.models import load_model


class BatchingGenerator:
    """Collects concurrent requests and generates them in batches on one engine."""

    def __init__(self, engine: HfEngine, gather_s: float) -> None:
        self.engine, self.gather_s = engine, gather_s
        self.requests: queue.Queue[tuple[list[int], SamplingParams, Future]] = queue.Queue()
        threading.Thread(target=self._loop, daemon=True).start()

    def submit(self, prompt: list[int], sampling: SamplingParams) -> Future:
        future: Future = Future()
        self.requests.put((prompt, sampling, future))
        return future

    def _loop(self) -> None:
        while True:
            pending = [self.requests.get()]
            deadline = time.monotonic() + self.gather_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    pending.append(self.requests.get(timeout=left))
                except queue.Empty:
                    break
            by_params: dict[SamplingParams, list[tuple[list[int], Future]]] = {}
            for prompt, sampling, future in pending:
                by_params.setdefault(sampling, []).append((prompt, future))
            for sampling, jobs in by_params.items():
                try:
                    completions = self.engine.generate([p for p, _ in jobs], sampling)
                except Exception as exc:  # every waiting request gets the error
                    for _, future in jobs:
                        future.set_exception(exc)
                    continue
                for (_, future), completion in zip(jobs, completions, strict=True):
                    future.set_result(completion)


def _sampling(body: dict[str, Any]) -> SamplingParams:
    temperature = float(body.get("temperature", 1.0))
    return SamplingParams(
        temperature=temperature or 1.0,
        greedy=temperature == 0.0,
        top_p=float(body.get("top_p", 1.0)),
        max_new_tokens=int(body.get("max_tokens", 16)),
        stop_token_ids=tuple(body.get("stop_token_ids") or ()),
        seed=body.get("seed"),
    )


def make_handler(generator: BatchingGenerator, model_name: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path != "/v1/completions" or not isinstance(body.get("prompt"), list):
                return self._reply(404, {"error": {"message": "only token-id /v1/completions is served"}})
            completion = generator.submit(list(body["prompt"]), _sampling(body)).result()
            choice = {
                "index": 0, "text": completion.text, "finish_reason": completion.finish_reason,
                "logprobs": {"tokens": [f"token_id:{i}" for i in completion.token_ids],
                             "token_logprobs": list(completion.logprobs)},
            }  # fmt: skip
            self._reply(200, {"model": body.get("model"), "choices": [choice]})

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/v1/models":
                return self._reply(200, {"object": "list", "data": [{"id": model_name, "object": "model"}]})
            self._reply(404, {"error": {"message": f"no route {self.path}"}})

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def main(argv: Sequence[str] | None = None) -> None:
    parser = argument_parser("hf-completion-server", __doc__)
    parser.add_argument("--model", default="tiny-random-llama")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of this server")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--gather-ms", type=float, default=20.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    generator = BatchingGenerator(HfEngine(model, tokenizer, batch_size=args.batch_size), args.gather_ms / 1000)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(generator, args.model))
    print(f"serving {args.model} on http://127.0.0.1:{args.port}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
