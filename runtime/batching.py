"""The runtime's side of batch mode (``batch: true`` on a model, agents/backends/batch.py):
before the episodes start, build each episode's first model request as the episode will make
it, and have the batch APIs answer them.

The first turn of an episode depends on its instance alone (nobody has replied yet), so its
request can be made ahead: the game master is set up from the seed, its first turn becomes a
:class:`~parley.bus.messages.TurnRequest` and the agent's prompt exactly as in
:class:`~parley.runtime.episode.EpisodeRunner`. A game whose episodes end after that turn
(clem's Reference guesser-less variants, playground perceiving and QA, MANGO questions) is
then played without a live call; in other games the first turn is the saving. Roles with
memory across episodes are left out (their prompt depends on earlier episodes), and so is
any request that comes out different in the episode: it is simply made live.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio

from parley.agents.agent import Agent
from parley.agents.backends import batch
from parley.agents.backends.client import ModelClient, ModelUnavailable
from parley.agents.backends.policy import LlmPolicy
from parley.agents.backends.pool import ModelPool
from parley.environments import registry
from parley.memory import HistoryPolicy
from parley.runtime.episode import turn_request
from parley.runtime.experiment import EpisodeSpec

log = logging.getLogger("parley.runtime.batching")
BATCH_FILE = "batch.json"


def first_request(
    spec: EpisodeSpec, run: str, pool: ModelPool
) -> tuple[ModelClient, dict[str, Any]] | None:
    """The model and request body of ``spec``'s first turn, when a batch model makes it."""
    info = registry.get(spec.game)
    instance = spec.instance or info.instance(spec.seed, spec.settings)
    gm = info.game_master(instance, spec.settings)
    turn = gm.next_turn()
    if turn is None:
        return None
    player = spec.players[turn.role]
    memory = spec.memory.get(turn.role)
    if player.kind != "llm" or player.model is None or (memory is not None and memory.remembers):
        return None
    model = pool.specs.get(player.model)
    if model is None or not model.batch:
        return None
    policy = pool.policy(player.model, player.params, turn.role)
    if not isinstance(policy, LlmPolicy) or policy.client is None:
        return None
    request = turn_request(turn, run=run, episode=spec.id, n=1, system=gm.system_prompt(turn.role))
    agent = Agent(
        turn.role,
        policy,
        history=HistoryPolicy(memory.policy, memory.k) if memory else None,
        memory_key=f"{spec.id}:{turn.role}",
    )
    prompt = agent.prepare(request)
    constraint, _ = policy.constraint(prompt)
    body, _ = policy.client.body(prompt.messages(), policy.params, constraint)
    return policy.client, body


async def prefetch_first_turns(
    specs: list[EpisodeSpec],
    pool: ModelPool,
    run: str,
    run_dir: Path | None = None,
    *,
    local: bool = True,
) -> list[dict[str, Any]]:
    """Answer the first turns of ``specs`` made by ``batch: true`` models through their batch
    APIs (one batch per model), into the models' reply stores; returns one record per batch,
    also written to ``batch.json`` in the run folder. Nothing to do: returns ``[]`` at once.
    ``local=False`` (episodes played by worker processes, whose model pools are their own):
    batch mode does not apply, and the log says so."""
    if not any(spec.batch for spec in pool.specs.values()):
        return []
    if not local:
        log.warning(
            "batch: true applies to runs played in this process (workers: 1); "
            "these episodes are played by workers, and their first turns go live"
        )
        return []
    wanted: dict[str, tuple[ModelClient, list[dict[str, Any]]]] = {}
    skipped = 0
    for spec in specs:
        try:
            # Instances and first observations may render pictures: off the event loop.
            found = await anyio.to_thread.run_sync(first_request, spec, run, pool)
        except ModelUnavailable:
            found = None
        except Exception as exc:  # the episode will meet (and record) the same problem
            log.warning("batch: no first request for %s: %s", spec.id, exc)
            found = None
        if found is None:
            skipped += 1
            continue
        client, body = found
        wanted.setdefault(client.name, (client, []))[1].append(body)
    outcomes = []
    for client, bodies in wanted.values():
        log.warning(
            "batch: the first turns of %d episodes go to model %s as one batch; the run waits "
            "for it (Ctrl-C stops the run and cancels the batch)",
            len(bodies),
            client.name,
        )
        outcome = await batch.fetch(client, bodies)
        outcomes.append(outcome.record())
        log.info(
            "batch %s for model %s: %s, %d of %d answered",
            outcome.batch_id,
            client.name,
            outcome.status,
            outcome.answered,
            outcome.requests,
        )
    if run_dir is not None and outcomes:
        (Path(run_dir) / BATCH_FILE).write_text(
            json.dumps({"batches": outcomes, "episodes_without": skipped}, indent=2) + "\n"
        )
    return outcomes
