"""The OpenAPI description of ``app/server/approval_routes.py``: deciding on a call a run
parked on (``approval_required``)."""

from __future__ import annotations

from typing import Any

from app.agent.approvals import DECISIONS
from app.server.openapi import ApiContribution, json_body, json_response, path_param, problem, schema_ref


def approvals_api() -> ApiContribution:
    paths: dict[str, dict[str, Any]] = {
        "/v1/agent/runs/{run_id}/approvals/{tool_use_id}": {
            "post": {
                "tags": ["runs"],
                "operationId": "decideApproval",
                "summary": "Approve, edit or reject a call the run waits on (owner only)",
                "description": "A run whose tool call needs approval (`AGENT_APPROVAL_TOOLS`) emits "
                "`approval_required` and waits, stored as `waiting_approval` and held by no replica. This "
                "decision continues it on whichever replica claims it: an approved or edited call runs once, "
                "a rejection goes back to the model as the call's result. Follow the run on with `stream_url`. "
                "Undecided, the approval expires after `AGENT_APPROVAL_TTL_S` and the run ends `cancelled`.",
                "parameters": [
                    path_param("run_id", {"type": "string"}, "The run."),
                    path_param("tool_use_id", {"type": "string"}, "The call, as `approval_required` named it."),
                ],
                "requestBody": json_body(schema_ref("ApprovalDecision")),
                "responses": {
                    "202": json_response("Decided; the run goes on", schema_ref("ApprovalAccepted")),
                    "400": problem("Not a decision, a member other than `decision` and `arguments` "
                                   "(`unknown_field`), or an edit whose arguments do not fit the tool's schema "
                                   "(`invalid_request`, `invalid_arguments`, `invalid_json`)"),
                    "401": problem("No valid bearer token (`unauthenticated`)", authenticate=True),
                    "404": problem("No such run of yours, or it does not wait on this call (`not_found`)"),
                    "409": problem("The run does not wait for a decision any more: decided already, cancelled, "
                                   "expired or ended (`approval_not_pending`, `approval_decided`)"),
                    "503": problem("The decision could not be stored (`storage_unavailable`)", retry_after=True),
                },
            }
        }
    }
    schemas: dict[str, dict[str, Any]] = {
        "ApprovalDecision": {
            "type": "object",
            "required": ["decision"],
            "additionalProperties": False,
            "properties": {
                "decision": {"enum": list(DECISIONS)},
                "arguments": {"type": ["object", "null"], "description": "With `edit` only (and required "
                              "there): the arguments to run the call with, checked against the tool's schema."},
            },
            # As ``approval_routes._decision`` reads it: an edit without arguments, or arguments
            # with another decision, is a 400 (schemathesis sent the latter as valid).
            "if": {"required": ["decision"], "properties": {"decision": {"const": "edit"}}},
            "then": {"required": ["arguments"], "properties": {"arguments": {"type": "object"}}},
            "else": {"properties": {"arguments": {"type": "null"}}},
        },
        "ApprovalAccepted": {
            "type": "object",
            "required": ["run_id", "tool_use_id", "decision", "status", "stream_url"],
            "properties": {
                "run_id": {"type": "string"},
                "tool_use_id": {"type": "string"},
                "decision": {"enum": list(DECISIONS)},
                "status": {"const": "running"},
                "stream_url": {"type": "string", "description": "The run's events after `approval_required`, "
                               "with a short-lived signed `token` (as `RunCreated.stream_url`)."},
            },
        },
    }
    return ApiContribution(paths=paths, schemas=schemas)
