"""First turns through the providers' batch APIs (``batch: true`` on a model), at about half
the price of live calls.

Before a run's episodes start, the runtime builds the request of each episode's first model
turn (runtime/batching.py) and hands them here. Per model, they go out as one batch:

- OpenAI: a JSONL file uploaded (``POST /v1/files``, ``purpose=batch``), a batch on it
  (``POST /v1/batches``), polled (``GET /v1/batches/{id}``), its output file read
  (``GET /v1/files/{id}/content``);
- Anthropic: a message batch (``POST /v1/messages/batches``), polled, its results read
  (``GET /v1/messages/batches/{id}/results``).

The replies go into the model's :class:`ReplyStore`, keyed by the request body: when an
episode then makes that very request, :meth:`ModelClient.complete` is served from the store
without a call, and the call record says ``batch`` (the report prices its tokens at half).
A request the batch did not answer (a failed line, an expired or failed batch, any error on
the way) is made live when its episode gets there, and its record says ``batch_fallback``.
Requests of later turns, which depend on earlier replies, are always made live.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from parley.agents.backends.formats import BadResponse, Reply, parse_anthropic, parse_openai

if TYPE_CHECKING:
    from parley.agents.backends.client import Completion, ModelClient

log = logging.getLogger("parley.agents.batch")

PRICE_FACTOR = 0.5  # what a batched token costs, as a share of the live price (both providers)
OPENAI_DONE = frozenset({"completed", "failed", "expired", "cancelled"})
# Fields of a request that do not change its reply (a batch request is never streamed).
_IGNORED = ("stream", "stream_options")


def request_key(body: dict[str, Any]) -> str:
    """The key of a request body in a :class:`ReplyStore` (streaming options left out)."""
    kept = {k: v for k, v in body.items() if k not in _IGNORED}
    data = orjson.dumps(kept, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.sha256(data).hexdigest()


@dataclass
class ReplyStore:
    """Replies fetched ahead for one model, by request; each served once (two episodes that
    make the same request each get their own reply)."""

    replies: dict[str, list[tuple[Reply, str]]] = field(default_factory=dict)
    # Requests the batch did not answer, and why: their live call's record says so.
    missing: dict[str, str] = field(default_factory=dict)
    served: int = 0

    def put(self, body: dict[str, Any], reply: Reply, batch_id: str) -> None:
        self.replies.setdefault(request_key(body), []).append((reply, batch_id))

    def take(self, body: dict[str, Any], notes: dict[str, Any]) -> Completion | None:
        """The stored reply to ``body`` as a completed call, or None (then ``notes``, the
        live call's record, learns why when the batch was meant to answer it)."""
        from parley.agents.backends.client import Completion

        key = request_key(body)
        waiting = self.replies.get(key)
        if not waiting:
            if key in self.missing:
                notes["batch_fallback"] = self.missing[key]
            return None
        reply, batch_id = waiting.pop(0)
        if not waiting:
            del self.replies[key]
        self.served += 1
        record: dict[str, Any] = {
            "attempt": 1,
            "endpoint": f"batch {batch_id}",
            "batch": True,
            "latency_s": 0.0,
            "outcome": "ok",
        }
        if reply.usage is not None:
            record["usage"] = {
                "input": reply.usage.input_tokens,
                "output": reply.usage.output_tokens,
            }
        if reply.finish_reason:
            record["finish_reason"] = reply.finish_reason
        return Completion(reply, [record], 0.0)


@dataclass
class BatchOutcome:
    """One model's batch: how it ended and how many of its requests it answered."""

    model: str
    provider: str
    requests: int
    batch_id: str = ""
    status: str = "not sent"
    answered: int = 0
    error: str = ""
    seconds: float = 0.0

    @property
    def fallback(self) -> int:
        """Requests that will be made live instead."""
        return self.requests - self.answered

    def record(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "provider": self.provider,
            "batch": self.batch_id,
            "status": self.status,
            "requests": self.requests,
            "answered": self.answered,
            "fallback": self.fallback,
            "seconds": round(self.seconds, 3),
            **({"error": self.error} if self.error else {}),
        }


async def fetch(
    client: ModelClient,
    bodies: Sequence[dict[str, Any]],
    *,
    poll_max_s: float = 30.0,
    timeout_s: float = 26 * 3600.0,
) -> BatchOutcome:
    """Send ``bodies`` (requests of ``client``'s model, as :meth:`ModelClient.body` makes
    them) as one batch, wait for it, and put its replies in ``client.replies``. Never
    raises for the batch's own failures: the outcome says what happened, and what was not
    answered is left to live calls."""
    store = client.replies if client.replies is not None else ReplyStore()
    client.replies = store
    provider = client.backend.provider
    outcome = BatchOutcome(client.name, provider, len(bodies))
    if not bodies:
        return outcome
    bodies = [{k: v for k, v in b.items() if k not in _IGNORED} for b in bodies]
    ids = [f"parley-{i}" for i in range(len(bodies))]
    by_id = dict(zip(ids, bodies, strict=True))
    start = time.monotonic()
    try:
        sdk = client.endpoints[0].client
        async with asyncio.timeout(timeout_s):
            if provider == "anthropic":
                answers = await _anthropic(sdk, by_id, outcome, poll_max_s)
            else:
                answers = await _openai(sdk, by_id, outcome, poll_max_s)
    except asyncio.CancelledError:
        # The run was stopped while it waited (Ctrl-C): the provider is told to stop too, so
        # the batch is not left to run (and be billed) for a run that is gone.
        if outcome.batch_id:
            await asyncio.shield(_cancel(sdk, provider, outcome.batch_id, client.name))
        raise
    except Exception as exc:  # any failure of the batch: its requests go live
        outcome.error = client.redact(f"{type(exc).__name__}: {exc}"[:500])
        answers = {}
        log.warning(
            "batch for model %s failed, its requests go live: %s", client.name, outcome.error
        )
    outcome.seconds = time.monotonic() - start
    for custom_id, body in by_id.items():
        answer = answers.get(custom_id)
        if isinstance(answer, Reply):
            store.put(body, answer, outcome.batch_id)
            outcome.answered += 1
        else:
            why = answer if isinstance(answer, str) else outcome.error or outcome.status
            store.missing[request_key(body)] = f"batch {outcome.batch_id or '-'}: {why}"
    return outcome


async def _cancel(sdk: Any, provider: str, batch_id: str, model: str) -> None:
    """Ask the provider to cancel batch ``batch_id``; a failure is logged, never raised."""
    try:
        async with asyncio.timeout(10.0):
            if provider == "anthropic":
                await sdk.messages.batches.cancel(batch_id)
            else:
                await sdk.batches.cancel(batch_id)
        log.warning("batch %s of model %s: cancelled at the provider", batch_id, model)
    except Exception as exc:
        log.warning("batch %s of model %s could not be cancelled: %s", batch_id, model, exc)


async def _sleep(delay: float, most: float) -> float:
    await asyncio.sleep(delay)
    return min(most, delay * 2)


async def _openai(
    sdk: Any, by_id: dict[str, dict[str, Any]], outcome: BatchOutcome, poll_max_s: float
) -> dict[str, Reply | str]:
    lines = b"".join(
        orjson.dumps(
            {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}
        )
        + b"\n"
        for cid, body in by_id.items()
    )
    upload = await sdk.files.create(
        file=("parley-batch.jsonl", lines, "application/jsonl"), purpose="batch"
    )
    batch = await sdk.batches.create(
        input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    outcome.batch_id = batch.id
    delay = 0.05
    while batch.status not in OPENAI_DONE:
        delay = await _sleep(delay, poll_max_s)
        batch = await sdk.batches.retrieve(batch.id)
    outcome.status = batch.status
    answers: dict[str, Reply | str] = {}
    # An expired batch may still have answered some lines: read whatever came out.
    for file_id in (batch.output_file_id, batch.error_file_id):
        if not file_id:
            continue
        content = await sdk.files.content(file_id)
        for raw in content.content.splitlines():
            if not raw.strip():
                continue
            line = orjson.loads(raw)
            cid = str(line.get("custom_id"))
            response = line.get("response") or {}
            if response.get("status_code") == 200:
                try:
                    answers[cid] = parse_openai(response.get("body"))
                except BadResponse as exc:
                    answers[cid] = f"bad response: {exc}"
            else:
                error = line.get("error") or (response.get("body") or {}).get("error") or {}
                answers[cid] = f"line failed: {error.get('message') or error}"
    return answers


async def _anthropic(
    sdk: Any, by_id: dict[str, dict[str, Any]], outcome: BatchOutcome, poll_max_s: float
) -> dict[str, Reply | str]:
    batch = await sdk.messages.batches.create(
        requests=[{"custom_id": cid, "params": body} for cid, body in by_id.items()]
    )
    outcome.batch_id = batch.id
    delay = 0.05
    while batch.processing_status != "ended":
        delay = await _sleep(delay, poll_max_s)
        batch = await sdk.messages.batches.retrieve(batch.id)
    outcome.status = "ended"
    answers: dict[str, Reply | str] = {}
    results = await sdk.messages.batches.results(batch.id)
    async for item in results:
        result = item.result
        if result.type == "succeeded":
            try:
                answers[item.custom_id] = parse_anthropic(
                    result.message.model_dump(mode="json", exclude_unset=True)
                )
            except BadResponse as exc:
                answers[item.custom_id] = f"bad response: {exc}"
        else:
            answers[item.custom_id] = f"line {result.type}"
    counts = batch.request_counts
    if counts.expired and not counts.succeeded:
        outcome.status = "expired"
    return answers
