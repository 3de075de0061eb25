"""Whether every process on the database signs and seals with the same keys.

Replicas must share ``AGENT_SECRET_KEY`` (or ``AGENT_STREAM_TOKEN_SECRET``): a
``stream_url`` one replica issues is checked by whichever the load balancer picks, and a
run one replica began is carried on by another after a crash or a deploy. A replica
started with another key served as if nothing were wrong — ``/readyz`` 200 — while its
links failed elsewhere (401 ``invalid stream token``) and the runs handed between it and
the others ended ``run_interrupted`` ("encrypted under another key"); found walking two
replicas on PostgreSQL with a third given a different key.

So each start compares a fingerprint of its keys with the one the last process to start
recorded (``app_secrets``: a one-way digest, no key can be read back from it), says so
at ERROR when they differ, and records its own. Both sides of a mismatch say it as each
starts; after a deliberate change of the key on every replica, the first to restart says
it once.
"""

from __future__ import annotations

import hashlib
import hmac
import logging

from app.keyring import Keyring
from storage.interfaces import SecretStore

log = logging.getLogger("agentchat.keyring")

#: The ``app_secrets`` row holding the fingerprint of the last start's keys.
KEY_CHECK_NAME = "key_check"
_LABEL = b"agentchat replica key check v1"


def key_fingerprint(keyring: Keyring) -> str:
    """A short digest of both keys (the stream key, and the run-input key when inputs
    are sealed): equal for processes that share their keys, and no help to anyone
    trying to recover them (HMAC under each key, then hashed together)."""
    stream = hmac.new(keyring.stream_secret.encode(), _LABEL, hashlib.sha256).digest()
    sealed = keyring.sealer.key_check if keyring.sealer is not None else b""
    return hashlib.sha256(stream + sealed).hexdigest()[:32]


async def check_shared_keys(keyring: Keyring, store: SecretStore) -> bool:
    """Record this process's key fingerprint; ``False`` (and an ERROR line naming the
    settings) when the one recorded before differs."""
    mine = key_fingerprint(keyring)
    before = await store.replace(KEY_CHECK_NAME, mine)
    if before is None or before == mine:
        return True
    log.error(
        "this process's keys differ from those of the process that started on this database before it "
        "(AGENT_SECRET_KEY / AGENT_STREAM_TOKEN_SECRET): stream_url links one issues are refused by the other "
        "(401 invalid stream token) and runs carried between them end run_interrupted. Give every replica "
        "the same key. If the key was changed on every replica on purpose, this is said once, by the first "
        "to restart",
        extra={"source": keyring.source},
    )
    return False


__all__ = ["KEY_CHECK_NAME", "check_shared_keys", "key_fingerprint"]
