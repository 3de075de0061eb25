"""Requests refused before admission because the storage did not answer in time.

Until its client has a run id, a request's storage steps (the buckets its context
names, the user's runs counted, the run waiting for an approval, the conversation
looked up, whether an OpenAI client's earlier answer was ours, a transcript imported, a
conversation cut back, the run's admission write) share one storage budget
(``app/server/storage_budget``). Past it, or when the storage says it is away, the
request is answered 503 ``storage_unavailable``. Those refusals happen where nothing else
counts them all - a read the budget's backstop cancelled never failed in the store, a
write refused because the budget was spent was never tried - so each is counted here,
by the step refused: an operator sees the 503s a client saw, and which step kept the
database waiting. Registered on the app's registry by ``AppMetrics``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal, get_args

from prometheus_client import CollectorRegistry, Counter

#: The admission steps bounded by the request's storage budget.
AdmissionCheck = Literal[
    "bucket_list",
    "run_limit",
    "waiting_run",
    "conversation",
    "answered_turns",
    "transcript_import",
    "history_cut",
    "run_admission",
]
ADMISSION_CHECKS: Final[tuple[AdmissionCheck, ...]] = get_args(AdmissionCheck)


class AdmissionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.storage_refusals = Counter(
            "agentchat_admission_storage_refusals_total",
            "Requests answered 503 storage_unavailable before their run was acknowledged because a storage "
            "step was not answered within the request's storage budget (AGENT_DB_POOL_TIMEOUT_S) or the "
            "storage was away, by check: bucket_list (the buckets the context names), run_limit (the user's "
            "runs counted before a transcript is imported or a conversation cut back), waiting_run (the run a "
            "409 approval_pending names), conversation (a compatible face's conversation looked up or copied), "
            "answered_turns (the OpenAI face's earlier answer looked up), transcript_import (a client's earlier "
            "turns stored), history_cut (a conversation cut back to regenerate or edit a turn), run_admission "
            "(the run's admission write).",
            ["check"],
            registry=registry,
        )
        for check in ADMISSION_CHECKS:  # every check shown from the start, 0 until refused
            self.storage_refusals.labels(check)

    def storage_refused(self, check: AdmissionCheck) -> Callable[[], None]:
        """What counts one refusal of ``check`` (``storage_budget.bounded``'s ``refused``)."""
        return self.storage_refusals.labels(check).inc
