"""Calling a model: the endpoints of a model shared across a run, least-outstanding
balancing, retries with backoff that honour Retry-After, a per-request deadline, the response
cache and the batch store consulted first, and the record of every attempt.

The parts live beside it: :mod:`~parley.agents.backends.endpoint` (an endpoint's pool,
limiter and health), :mod:`~parley.agents.backends.retry` (what a failure means),
:mod:`~parley.agents.backends.transport` (the APIs and the two transports) and
:mod:`~parley.agents.backends.network` (proxies and TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from parley.agents.backends import dialect
from parley.agents.backends import spans as genai_spans
from parley.agents.backends.cache import request_key
from parley.agents.backends.dialect import ServerInfo
from parley.agents.backends.formats import (
    MAX_REPLY_CHARS,
    Reply,
)
from parley.agents.backends.spec import GenerationParams, ModelSpec

if TYPE_CHECKING:
    from parley.agents.backends.batch import ReplyStore
    from parley.agents.backends.cache import ResponseCache
    from parley.agents.backends.constrain import Constraint
from parley.agents.backends.endpoint import Endpoint
from parley.agents.backends.retry import Failure, classify
from parley.agents.backends.transport import BACKENDS, usage_details
from parley.bus.messages import PromptMessage, Usage

TracerFn = Callable[[], trace.Tracer]


class ModelUnavailable(RuntimeError):
    """A model call that cannot succeed: gave up after retries, a refusal that retrying cannot
    fix (400, 401…), a missing API key, a server that never came up. Raised from the policy,
    it ends the episode as ``error`` with this message as the reason; ``calls`` holds the
    record of each attempt (the episode counts them in ``model_calls``)."""

    # The episode's reason code when this ends it (environments/base.py ReasonCode); None:
    # the runtime's own (``exception``).
    reason_code: str | None = None

    def __init__(self, message: str, calls: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.calls = calls or []


class ContextExceeded(ModelUnavailable):
    """A prompt longer than the model's context: never sent when parley can tell beforehand
    (``context_size``, or the size the server reports), and what a server's refusal of the
    same is classified as. Ends the episode with reason code ``context_exceeded``."""

    reason_code = "context_exceeded"

    def __init__(
        self,
        message: str,
        calls: list[dict[str, Any]] | None = None,
        *,
        prompt_tokens: int | None = None,
        context_size: int | None = None,
    ) -> None:
        super().__init__(message, calls)
        self.prompt_tokens = prompt_tokens
        self.context_size = context_size


@dataclass
class Completion:
    """A model's reply with everything it took to get it."""

    reply: Reply
    calls: list[dict[str, Any]] = field(default_factory=list)
    latency_s: float = 0.0
    # The constraint as sent (its form settled by the server's dialect), or None.
    constraint: Constraint | None = None


class ModelClient:
    """One model of the registry, over one or more shared endpoints."""

    def __init__(
        self,
        name: str,
        spec: ModelSpec,
        endpoints: list[Endpoint],
        *,
        secrets: tuple[str, ...] = (),
        tracer: TracerFn | None = None,
        unavailable: str | None = None,
    ) -> None:
        self.name = name
        self.spec = spec
        self.backend = BACKENDS[spec.backend]
        self.endpoints = endpoints
        # Header values (an Authorization header of the config) are secrets as much as the key.
        # (Short values such as "1" would mask ordinary words of error messages.)
        header_values = [v.split()[-1] for v in spec.headers.values() if len(v.strip()) >= 6]
        credentials = [c for e in endpoints for c in e.credentials]
        self.secrets = tuple(s for s in (*secrets, *header_values, *credentials) if s)
        self.tracer = tracer or (lambda: trace.get_tracer("parley.agents"))
        self.unavailable = unavailable
        self._rng = random.Random()
        self._turn = 0
        # Replies fetched ahead through a batch API (batch.py), consulted before calling.
        self.replies: ReplyStore | None = None
        # The response cache (cache.py), consulted before calling, filled by successes.
        self.cache: ResponseCache | None = None
        # The entry as its server is (identify()): None until the endpoints are known.
        self._served: ModelSpec | None = None

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def pick(self) -> Endpoint:
        """The healthy endpoint with the fewest requests outstanding (ties taken in turn);
        when none is healthy, the one that comes back soonest."""
        endpoints = self.endpoints
        if len(endpoints) == 1:
            return endpoints[0]
        healthy = [e for e in endpoints if e.healthy]
        if not healthy:
            return min(endpoints, key=lambda e: e.down_until)
        self._turn += 1
        n = len(healthy)
        order = [healthy[(self._turn + i) % n] for i in range(n)]
        return min(order, key=lambda e: e.outstanding)

    def backoff(self, attempt: int, failure: Failure) -> float:
        retry = self.spec.retry
        if failure.retry_after_s is not None:
            wait = min(failure.retry_after_s, retry.retry_after_max_s)
            return wait + self._rng.uniform(0.0, 0.1 * wait + 0.01)
        ceiling = min(retry.backoff_max_s, retry.backoff_s * 2 ** (attempt - 1))
        return self._rng.uniform(0.0, ceiling)  # full jitter

    @property
    def info(self) -> ServerInfo:
        """The dialect of the model's first endpoint as known so far (``unknown`` until it is
        probed)."""
        known = self.endpoints[0].info if self.endpoints else None
        return known or dialect.ServerInfo("unknown", "probe", evidence="not probed yet")

    async def identify(self) -> ServerInfo:
        """Probe the endpoints once (those not known from the config or their host), and
        settle what follows for this model: the constraint form, a context size the entry
        does not declare, and no images where the server takes none."""
        if self._served is not None:
            return self.info
        infos = await asyncio.gather(*(e.identify() for e in self.endpoints))
        spec = self.spec
        changes: dict[str, Any] = {}
        if spec.context_size is None:
            sizes = [i.context_size for i in infos if i.context_size]
            if sizes:
                changes["context_size"] = min(sizes)
        if spec.images and any(i.images is False for i in infos):
            changes["images"] = False
        self._served = spec.model_copy(update=changes) if changes else spec
        return self.info

    @property
    def served_spec(self) -> ModelSpec:
        """The entry as the server is: :attr:`spec` with what :meth:`identify` learnt."""
        return self._served or self.spec

    def _held(
        self, body: dict[str, Any], notes: dict[str, Any], constraint: Constraint | None
    ) -> tuple[dict[str, Any], Constraint | None]:
        """``body`` with ``constraint`` in the form the server takes; the call's notes say
        whether it was held, and why not."""
        if constraint is None:
            return body, None
        sent = constraint.resolved(self.info.constraint)
        if sent is None:
            notes.update(
                constrained=False,
                constraint=f"the {self.info.traits.label} server takes no constraint on the reply",
            )
            return body, None
        notes.update(sent.record())
        return sent.apply(body), sent

    def body(
        self,
        messages: list[PromptMessage],
        params: GenerationParams,
        constraint: Constraint | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The request body of a call, and notes for its record (images, max_tokens, the
        constraint as sent)."""
        body, notes = self.backend.body(messages, self.served_spec, params)
        body, _ = self._held(body, notes, constraint)
        return body, notes

    def cache_key(
        self,
        messages: list[PromptMessage],
        params: GenerationParams,
        constraint: Constraint | None = None,
        draw: Mapping[str, Any] | None = None,
    ) -> str:
        """The response cache's key of a call: the request as the entry asks it (before
        anything a server's dialect changes), the legal actions it is held to, and — unless
        sampling is greedy (``temperature: 0``) — the draw (``seed`` and ``repetition`` of
        the episode), so that one repetition never replays another's reply."""
        identity, _ = self.backend.body(messages, self.spec, params)
        return self._key(identity, constraint, draw, params)

    def _key(
        self,
        identity: dict[str, Any],
        constraint: Constraint | None,
        draw: Mapping[str, Any] | None,
        params: GenerationParams,
    ) -> str:
        identity = dict(identity)
        if constraint is not None:
            identity["parley.constrain"] = list(constraint.choices)
        if draw and params.temperature != 0:
            identity["parley.draw"] = dict(draw)
        return request_key(self.backend.provider, identity)

    async def complete(
        self,
        messages: list[PromptMessage],
        params: GenerationParams,
        *,
        constraint: Constraint | None = None,
        draw: Mapping[str, Any] | None = None,
    ) -> Completion:
        """Ask the model, retrying what can be retried; raises :class:`ModelUnavailable`
        (:class:`ContextExceeded` for a prompt over the context, which is never sent).
        ``constraint`` holds the reply to the turn's legal actions (constrain.py), in the
        form the endpoint's dialect takes; a reply the run's batch fetched for this very
        request (batch.py) or the response cache holds is served without a call."""
        if self.unavailable:
            raise ModelUnavailable(f"model {self.name} is unavailable: {self.unavailable}")
        spec = self.spec
        fallback: dict[str, Any] = {}
        if self.replies is not None:
            body, notes = self.body(messages, params, constraint)
            stored = self.replies.take(body, fallback)
            if stored is not None:
                stored.constraint = (
                    constraint.resolved(self.info.constraint) if constraint else None
                )
                return stored
        body, notes = self.backend.body(messages, spec, params)
        key: str | None = None
        if self.cache is not None:
            key = self._key(body, constraint, draw, params)
            entry = await self.cache.get(key)
            if entry is not None:
                done = _replayed(entry, notes, constraint)
                self._trace_replay(body, done)
                return done
        if self._served is None:
            await self.identify()
        if self.served_spec is not spec:
            body, notes = self.backend.body(messages, self.served_spec, params)
        body, sent = self._held(body, notes, constraint)
        notes.update(fallback)  # why a batch that was to answer this did not
        context = self.served_spec.context_size
        estimate = notes.get("prompt_tokens_estimate")
        if context is not None and estimate is not None and estimate > context:
            # Never sent: the server would refuse it, or cut the prompt and answer something.
            record = {"attempt": 1, "endpoint": self.endpoints[0].label, **notes}
            record.update(
                outcome="context_exceeded",
                sent=False,
                error="not sent: the prompt is over the context",
            )
            raise ContextExceeded(
                f"model {self.name}: the prompt is about {estimate} tokens, over the model's "
                f"context of {context} tokens; not sent (keep fewer turns in memory, or give "
                "the model a bigger context)",
                [record],
                prompt_tokens=estimate,
                context_size=context,
            )
        calls: list[dict[str, Any]] = []
        start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            endpoint = self.pick()
            record = {"attempt": attempt, "endpoint": endpoint.label}
            if attempt == 1 and notes:
                record.update(notes)
            calls.append(record)
            try:
                reply = await self._attempt(endpoint, body, record)
            except Failure as failure:
                record["outcome"] = failure.kind
                if failure.status:
                    record["status"] = failure.status
                record["error"] = self.redact(failure.message)
                if failure.retry_after_s is not None:
                    record["retry_after_s"] = round(failure.retry_after_s, 3)
                if failure.details:
                    record.update(failure.details)
                elapsed = time.monotonic() - start
                delay = self.backoff(attempt, failure)
                if (
                    not failure.retryable
                    or attempt >= spec.retry.max_attempts
                    or elapsed + delay > spec.retry.max_elapsed_s
                ):
                    endpoint.gave_up += 1
                    message = self._give_up(calls, elapsed, failure)
                    if failure.kind == "context_exceeded":
                        raise ContextExceeded(
                            message, calls, prompt_tokens=estimate, context_size=context
                        ) from None
                    raise ModelUnavailable(message, calls) from None
                record["backoff_s"] = round(delay, 3)
                await asyncio.sleep(delay)
                continue
            record["outcome"] = "ok"
            done = Completion(reply, calls, time.monotonic() - start, sent)
            if key is not None and self.cache is not None:
                # Only successes reach here: errors are never cached.
                await self.cache.put(key, spec.model, _cache_entry(reply, record))
            return done

    def _trace_replay(self, body: dict[str, Any], done: Completion) -> None:
        """A chat span for a reply the response cache served (``parley.cached``), so that a
        replayed turn keeps its model call in the trace; no server is named."""
        tracer = self.tracer()
        if isinstance(tracer, trace.NoOpTracer):
            return
        usage = done.reply.usage
        details = done.calls[0].get("usage") or {}
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.backend.provider,
            "gen_ai.request.model": self.spec.model,
            "parley.model": self.name,
            "parley.cached": True,
        }
        if usage is not None:
            attributes["gen_ai.usage.input_tokens"] = (
                usage.input_tokens + details.get("cache_read", 0) + details.get("cache_write", 0)
            )
            attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        if done.reply.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = [done.reply.finish_reason]
        conversation = genai_spans.conversation_id()
        if conversation:
            attributes["gen_ai.conversation.id"] = conversation
        with tracer.start_as_current_span(
            f"chat {self.spec.model}", kind=trace.SpanKind.CLIENT, attributes=attributes
        ):
            pass

    def _give_up(self, calls: list[dict[str, Any]], elapsed: float, failure: Failure) -> str:
        kinds = Counter(c.get("outcome", "?") for c in calls)
        summary = ", ".join(f"{k} ×{n}" for k, n in kinds.items())
        last = self.redact(str(failure))
        if failure.kind in ("too_large", "redirect"):
            return f"model {self.name}: not retried ({last})"
        if not failure.retryable:
            return f"model {self.name} refused the request ({last})"
        return (
            f"model {self.name} unreachable: gave up after {len(calls)} attempts in "
            f"{elapsed:.1f} s ({summary}); last: {last}"
        )

    async def _attempt(
        self, endpoint: Endpoint, body: dict[str, Any], record: dict[str, Any]
    ) -> Reply:
        spec = self.spec
        limiter = endpoint.limiter
        endpoint.outstanding += 1
        queued = time.monotonic()
        try:
            if not limiter.try_acquire():
                await limiter.acquire()
            try:
                sent = time.monotonic()
                if sent - queued > 0.0005:
                    record["queued_s"] = round(sent - queued, 4)
                tracer = self.tracer()
                content = False
                if isinstance(tracer, trace.NoOpTracer):
                    # Tracing off: no span, and no attributes built for one.
                    span_context: Any = _NO_SPAN
                else:
                    attributes: dict[str, Any] = {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": self.backend.provider,
                        "gen_ai.request.model": spec.model,
                        "parley.model": self.name,
                        "parley.attempt": int(record["attempt"]),
                        # Sampling parameters, max tokens, server host and port (spans.py).
                        **genai_spans.request_attributes(body, endpoint.url),
                    }
                    content = genai_spans.record_content()  # the conversation: opt-in only
                    if content:
                        attributes.update(genai_spans.content_attributes(body))
                    # The episode: on the agent's span this call runs under (or as baggage).
                    conversation = genai_spans.conversation_id()
                    if conversation:
                        attributes["gen_ai.conversation.id"] = conversation
                    # Direct transport's session reads no current span, the traceparent
                    # going as a header: its span is only started (a context set and reset less
                    # a call) and, used as a context manager, ends on the way out. Through the
                    # SDK it is current, for instrumentation of the SDK's HTTP client.
                    start = (
                        tracer.start_as_current_span
                        if endpoint.direct is None
                        else tracer.start_span
                    )
                    span_context = start(
                        f"chat {spec.model}",
                        kind=trace.SpanKind.CLIENT,
                        attributes=attributes,
                        # Exceptions carry server messages: the span gets the scrubbed kind only.
                        record_exception=False,
                        set_status_on_exception=False,
                    )
                with span_context as span:
                    try:
                        async with asyncio.timeout(spec.timeout_s):
                            # The chat span's traceparent: a tracing server joins the trace.
                            reply = await endpoint.send(
                                body, spec.stream, genai_spans.traceparent(span)
                            )
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        failure = classify(exc)
                        # Servers may echo the key in an error: scrub it before it goes anywhere.
                        failure.message = self.redact(failure.message)
                        record["latency_s"] = round(time.monotonic() - sent, 4)
                        span.set_status(trace.Status(trace.StatusCode.ERROR, failure.kind))
                        span.set_attribute("error.type", failure.kind)
                        endpoint.failed(failure)
                        raise failure from None
                    latency = time.monotonic() - sent
                    record["latency_s"] = round(latency, 4)
                    endpoint.latencies.append(latency)
                    if reply.ttft_s is not None:
                        record["ttft_s"] = round(reply.ttft_s, 4)
                    usage = reply.usage
                    if usage is not None:
                        record["usage"] = {
                            "input": usage.input_tokens,
                            "output": usage.output_tokens,
                            # Reasoning tokens (part of the output) and prompt-cache reads and
                            # writes (apart from the input), where the response reports them.
                            **usage_details(reply.raw),
                        }
                    if reply.finish_reason:
                        record["finish_reason"] = reply.finish_reason
                    if reply.repaired:
                        record["repaired"] = reply.repaired
                    if reply.length is not None:
                        record["cut"] = {"from": reply.length, "to": MAX_REPLY_CHARS}
                    if span.is_recording():
                        # One call: the SDK takes its lock once per call.
                        done: dict[str, Any] = {}
                        if usage is not None:
                            details = record["usage"]
                            read = details.get("cache_read", 0)
                            write = details.get("cache_write", 0)
                            # GenAI conventions: input tokens include those the provider's
                            # prompt cache served or stored, which are also given apart.
                            done["gen_ai.usage.input_tokens"] = usage.input_tokens + read + write
                            done["gen_ai.usage.output_tokens"] = usage.output_tokens
                            if read:
                                done["gen_ai.usage.cache_read.input_tokens"] = read
                            if write:
                                done["gen_ai.usage.cache_creation.input_tokens"] = write
                            if details.get("reasoning"):
                                done["parley.usage.reasoning_tokens"] = details["reasoning"]
                        if reply.finish_reason:
                            done["gen_ai.response.finish_reasons"] = [reply.finish_reason]
                        if reply.model:
                            done["gen_ai.response.model"] = reply.model
                        done.update(genai_spans.reply_attributes(reply, content, spec.price))
                        span.set_attributes(done)
                    endpoint.succeeded()
                    return reply
            finally:
                limiter.release()
        finally:
            endpoint.outstanding -= 1


def _cache_entry(reply: Reply, record: dict[str, Any]) -> dict[str, Any]:
    """What the response cache keeps of a successful call: the reply as parsed, and the
    call's usage and finish reason as its record had them."""
    usage = reply.usage
    return {
        "text": reply.text,
        "usage": None
        if usage is None
        else {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "source": usage.source,
        },
        "finish_reason": reply.finish_reason,
        "model": reply.model,
        "raw": reply.raw,
        "repaired": reply.repaired,
        "length": reply.length,
        "call": {
            k: record[k]
            for k in ("usage", "finish_reason", "repaired", "cut", "constrained", "constraint")
            if k in record
        },
    }


def _replayed(
    entry: dict[str, Any], notes: dict[str, Any], constraint: Constraint | None = None
) -> Completion:
    """A cached reply as a completion: one attempt, ``cached``, taking no time; held to
    ``constraint`` in the form it was first sent."""
    usage = entry.get("usage")
    reply = Reply(
        text=entry["text"],
        usage=Usage(**usage) if usage is not None else None,
        finish_reason=entry.get("finish_reason"),
        model=entry.get("model") or "",
        raw=entry.get("raw") or {},
        repaired=int(entry.get("repaired") or 0),
        length=entry.get("length"),
    )
    record: dict[str, Any] = {"attempt": 1, "endpoint": "cache", **notes}
    record.update(entry.get("call") or {})
    record.update(outcome="ok", cached=True, latency_s=0.0)
    sent: Constraint | None = None
    held = record.get("constraint")
    if constraint is not None and record.get("constrained") and isinstance(held, dict):
        sent = constraint.resolved(held.get("via"))
    return Completion(reply, [record], 0.0, sent)


# What a model call runs in when tracing is off (the tracer is a no-op one).
_NO_SPAN = contextlib.nullcontext(trace.INVALID_SPAN)


def api_key(spec: ModelSpec, environ: Mapping[str, str] | None = None) -> str | None:
    """The API key from the variable the entry names; raises when it is named but unset."""
    if spec.api_key_env is None:
        return None
    value = (environ if environ is not None else os.environ).get(spec.api_key_env)
    if not value:
        raise ModelUnavailable(
            f"environment variable {spec.api_key_env} (api_key_env of model {spec.model}) is not set"
        )
    return value
