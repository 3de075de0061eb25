"""Starting a run, or refusing it before anything streams: the replica's load (503
``replica_busy``), the user's run cap (429 ``too_many_runs``), the busy conversation (409;
``approval_pending`` while a run of it waits for a decision), the store away (503) — in
the order ``docs/http-api.md`` documents for every face.

Its own module because every face starts its runs here and nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.runs.admission import ReplicaFull
from app.runs.records import Caller, ChatInput
from app.runs.run import Run
from app.runs.state import RunState
from app.server import storage_budget
from app.server.context_scope import check_bucket_scope
from app.server.identity import Identity
from app.server.problems import HTTPProblem
from storage.errors import ApprovalPending, ConversationBusy, StorageUnavailable, TooManyRuns

if TYPE_CHECKING:
    from app.server.services import Services


def replica_busy(why: str) -> HTTPProblem:
    """503 for a new run this replica cannot serve well now (``app/ops/load.py``): the
    client retries, and a load balancer sends the retry where there is room."""
    return HTTPProblem(
        503, "replica_busy", f"{why}; retry shortly (another replica may have room)", {"Retry-After": "2"}
    )


_BUSY = {
    "loop_lag": "this replica is overloaded (its event loop runs late)",
    "model_pool": "this replica carries a live run for each of its model connections (AGENT_LLM_MAX_CONNECTIONS)",
}


def check_load(svc: Services, *, new_run: bool = True) -> None:
    """Refuse a new run (503 ``replica_busy``) while this replica is overloaded. Every
    face's ``start_run`` asks; a face with work to do before it (the OpenAI face imports
    a transcript) asks first, so a refusal leaves nothing behind."""
    load = svc.load
    if load is not None and (reason := load.refusal(new_run=new_run)) is not None:
        load.refused_for(reason)
        raise replica_busy(_BUSY[reason])


def too_many_runs() -> HTTPProblem:
    return HTTPProblem(429, "too_many_runs", "too many runs in progress for this user", {"Retry-After": "5"})


async def check_run_limit(svc: Services, user_id: str) -> None:
    """Counts the user's unfinished runs in the store: refuses early when the user is at
    the cap. The cap itself is held by ``start_run``, which counts again in the
    transaction that stores the run (concurrent requests on any replica all pass this
    read at once), so only the writes ahead of that transaction call this
    (``check_run_limit_before_write``: ``compat_runs.import_history`` before it writes a
    client's earlier turns, ``history_branch.cut_history`` before it cuts a conversation
    back): a refusal must not leave them behind. It is called after the request's own checks, so every face answers in
    the one order of ``docs/http-api.md`` (the request's own 4xx first, then 429
    ``too_many_runs``). The native faces go straight to ``start_run``: one read less per
    run (a hop to a reader thread on SQLite, a round trip on PostgreSQL)."""
    cap = svc.settings.max_runs_per_user
    if await svc.limits.active_runs(user_id, svc.runs.registry, cap) >= cap:
        raise too_many_runs()


async def check_run_limit_before_write(svc: Services, user_id: str, what: str) -> None:
    """``check_run_limit`` ahead of a write that precedes the run's admission (a client's
    transcript imported, a conversation cut back), within the request's storage budget:
    503 ``storage_unavailable`` (``what``) when the budget is already spent or runs out
    on the read, each counted as ``run_limit`` (``agentchat_admission_storage_refusals_total``);
    a 429 passes through."""
    refused = svc.metrics.admission.storage_refused("run_limit")
    if storage_budget.spent():  # the database kept the request waiting its whole budget already
        refused()
        raise storage_budget.unavailable(what)
    await storage_budget.bounded(what, check_run_limit(svc, user_id), refused=refused)


async def start_run(svc: Services, ident: Identity, chat: ChatInput, *, key: str | None = None) -> Run:
    """Store the run and its message, claim the conversation, start the agent — or
    refuse with a 4xx/503 before anything streams. ``IdempotencyKeyUsed`` passes
    through: a concurrent request with the same key started the run first. Every face
    (native, OpenAI-compatible, AI SDK) starts its runs here, so the context's
    knowledge-base scope is checked here once (``app/server/context_scope.py``).

    The refusals come in the order ``docs/http-api.md`` documents for every face: the
    unknown bucket (400), the replica's load (503 ``replica_busy``), then the admission
    transaction's own — the busy conversation (409, ``reject``) before the user's run
    cap (429 ``too_many_runs``). The admission transaction waits for the database only
    as long as the request's storage budget has left (``storage_budget``): 503
    ``storage_unavailable`` then, with nothing stored."""
    await check_bucket_scope(svc, chat.context)
    check_load(svc)
    try:
        return await svc.runs.submit(
            chat,
            Caller(ident.user_id, ident.authorization),
            idempotency_key=key,
            run_cap=svc.settings.max_runs_per_user,
            deadline=storage_budget.deadline(),
        )
    except TooManyRuns:
        raise too_many_runs() from None
    except ReplicaFull as exc:
        if svc.load is not None:
            svc.load.refused_for(exc.reason)
        raise replica_busy(str(exc)) from None
    except ApprovalPending as exc:
        raise await approval_pending(svc, exc.run_id) from None
    except ConversationBusy:
        raise HTTPProblem(
            409,
            "conversation_busy",
            "a run of this conversation is still in progress; wait for it to end, or send "
            'multitask "enqueue" (run after it) or "interrupt" (cancel it)',
        ) from None
    except StorageUnavailable:
        svc.metrics.admission.storage_refused("run_admission")()
        raise storage_budget.unavailable("the service cannot store new runs right now") from None


async def approval_pending(svc: Services, run_id: str) -> HTTPProblem:
    """409 ``approval_pending``: the conversation's run ``run_id`` waits for its user's
    decision on a tool call, and a new message would wait behind it for as long as the
    approval lives (``AGENT_APPROVAL_TTL_S``, a day by default) — a chat showing only
    ``start`` and pings. The answer names the run, the call and the decision route, so a
    UI shows the pending card (docs/approvals.md); ``multitask: "interrupt"`` is how a
    client moves on without deciding (it cancels the waiting run). The call is read from
    the run's checkpoint; a run decided meanwhile names no call (its run goes on)."""
    stored = await storage_budget.bounded(
        "the service cannot read runs right now",
        svc.run_store.get(run_id),
        refused=svc.metrics.admission.storage_refused("waiting_run"),
    )
    awaiting = RunState.decode(stored.checkpoint).awaiting if stored is not None and stored.checkpoint else None
    call_id = str((awaiting or {}).get("tool_use_id") or "")
    name = str((awaiting or {}).get("name") or "")
    fields: dict[str, Any] = {"run_id": run_id, "tool_use_id": call_id or None, "tool_name": name or None}
    if call_id:
        fields["decide_url"] = f"/v1/agent/runs/{run_id}/approvals/{call_id}"
        what = f"a decision on {name or 'a tool call'} ({call_id}): POST {fields['decide_url']}"
    else:
        what = "a decision on a tool call"
    return HTTPProblem(
        409,
        "approval_pending",
        f"run {run_id} of this conversation waits for {what}, then send the message again; "
        'or send it with multitask "interrupt" to cancel the waiting run',
        fields=fields,
    )
