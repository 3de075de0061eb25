"""``POST /v1/agent/runs/{run_id}/approvals/{tool_use_id}``: the user's decision on a call
the run parked on (``approval_required``).

The decision is written into the parked run's checkpoint by one conditional update (the
run must still wait, at the checkpoint read here): of two decisions, or a decision racing
the expiry or a cancel, on any replicas, exactly one wins — the others get 409. The run
is then claimable, and this process claims it at once to carry it on (another replica's
periodic claim may take it first: then that one does). Only the run's owner may decide:
anyone else gets the same 404 as for a run that does not exist.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from agenttools.core.validation import validate_arguments
from app.agent.approvals import DECISIONS
from app.runs.records import could_be_run_id
from app.runs.state import RunState
from app.server import request_admission
from app.server.problems import HTTPProblem, ORJSONResponse
from app.server.unknown_fields import refuse_unknown_fields
from storage.errors import StorageUnavailable
from storage.records import WAITING_APPROVAL

if TYPE_CHECKING:
    from app.server.services import Services
    from storage.records import StoredRun

log = logging.getLogger("agentchat.approvals")


def _decision(body: Any) -> tuple[str, dict[str, Any] | None]:
    if not isinstance(body, dict):
        raise HTTPProblem(400, "invalid_request", "the body must be a JSON object")
    refuse_unknown_fields(body, ("decision", "arguments"))
    decision = body.get("decision")
    if decision not in DECISIONS:
        raise HTTPProblem(400, "invalid_request", "decision must be one of approve, reject, edit")
    arguments = body.get("arguments")
    if decision == "edit":
        if not isinstance(arguments, dict):
            raise HTTPProblem(400, "invalid_request", "an edit needs arguments: a JSON object")
        return decision, arguments
    if arguments is not None:
        raise HTTPProblem(400, "invalid_request", "arguments go with the decision edit only")
    return decision, None


async def apply_decision(
    svc: Services, user_id: str, run_id: str, tool_use_id: str, decision: str, arguments: dict[str, Any] | None
) -> StoredRun:
    """Store the owner's decision on the call ``run_id`` waits on and carry the run on;
    the run as it was read (its ``last_seq``: where the continued stream starts). Shared
    by this route and the AI SDK face (a ``useChat`` approval reply): the same rules, the
    same 404 / 409 answers."""
    stored = await svc.run_store.get(run_id) if could_be_run_id(run_id) else None
    if stored is None or stored.user_id != user_id:
        raise HTTPProblem(404, "not_found", "no such run")
    if stored.status != WAITING_APPROVAL or stored.checkpoint is None:
        raise HTTPProblem(409, "approval_not_pending", f"the run is not waiting for a decision ({stored.status})")
    state = RunState.decode(stored.checkpoint)
    awaiting = state.awaiting or {}
    if awaiting.get("tool_use_id") != tool_use_id:
        if tool_use_id in state.approvals:
            raise HTTPProblem(409, "approval_decided", "this call was already decided")
        raise HTTPProblem(404, "not_found", "the run does not wait for a decision on this call")
    name = str(awaiting.get("name", ""))
    entry: dict[str, Any] = {"decision": decision}
    if arguments is not None:
        spec = svc.agent.registry.get(name)
        if spec is None:
            raise HTTPProblem(409, "tool_unavailable", f"the tool {name} is no longer available to edit against")
        checked = validate_arguments(spec, arguments)
        if not checked.ok:
            raise HTTPProblem(400, "invalid_arguments", f"the arguments do not fit {name}: {checked.error}")
        entry["arguments"] = checked.arguments
    state.approvals[tool_use_id] = entry
    try:
        won = await svc.run_store.decide(run_id, user_id, stored.checkpoint_seq, state.encode())
    except StorageUnavailable:
        raise HTTPProblem(
            503, "storage_unavailable", "the decision could not be stored; retry shortly", {"Retry-After": "2"}
        ) from None
    if not won:
        raise HTTPProblem(409, "approval_decided", "the approval was decided, cancelled or expired meanwhile")
    svc.runs.note_decision(decision)
    try:
        await svc.runs.resume_decided(run_id)
    except StorageUnavailable:  # the decision is stored: the next periodic claim (any replica) carries it on
        log.warning("a decided run could not be claimed at once", extra={"run_id": run_id})
    return stored


async def decide(request: Request) -> Response:
    svc = request_admission.services(request)
    ident = request_admission.identify(request)
    run_id = request.path_params["run_id"]
    tool_use_id = request.path_params["tool_use_id"]
    decision, arguments = _decision(await request_admission.read_json_body(request, svc.settings.max_body_bytes))
    stored = await apply_decision(svc, ident.user_id, run_id, tool_use_id, decision, arguments)
    token = svc.auth.stream_token(run_id, ident.user_id)
    return ORJSONResponse(
        {
            "run_id": run_id,
            "tool_use_id": tool_use_id,
            "decision": decision,
            "status": "running",
            "stream_url": f"/v1/agent/runs/{run_id}/events?token={token}&after={stored.last_seq}",
        },
        status_code=202,
    )
