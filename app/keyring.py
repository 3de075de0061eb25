"""The service's own keys, kept where a copy of the database cannot reach them.

Two keys:

* the **stream key** signs ``stream_url`` tokens: whoever holds it can read any run.
* the **input key** encrypts what the database keeps of a caller's credentials — a
  live run's ``Authorization``, needed only to carry the run on after a restart
  (``RunInputSealer``; Fernet from ``cryptography``: AES-128-CBC with an HMAC).

Where they come from, first match wins:

1. ``AGENT_STREAM_TOKEN_SECRET`` signs streams as it is; ``AGENT_SECRET_KEY`` (else the
   stream secret) derives the input key (HKDF-SHA256, one label per use).
2. ``AGENT_SECRET_KEY`` alone derives both.
3. SQLite, nothing set (``make run``): a random master key in a file beside the
   database (``<db>.key``, mode 0600), created once by the first process (atomically:
   processes starting together read the same key); a backup of the database file alone
   cannot forge a link or read a credential.
4. PostgreSQL, nothing set: refused at start-up — replicas share only the database, so
   the key would have to live in it. ``AGENT_STREAM_KEY_IN_DATABASE=1`` accepts that
   (the earlier behaviour: a generated key in ``app_secrets``, in plain text; run inputs
   then stored unencrypted).

A plain-text stream key an earlier version left in ``app_secrets`` is no longer used in
cases 1-3 (tokens signed with it are refused), so a copy of it forges nothing; delete
the row at leisure (``DELETE FROM app_secrets WHERE name = 'stream_token'``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from app.config import Settings
from storage.interfaces import SecretStore

log = logging.getLogger("agentchat.keyring")

#: The row ``app_secrets`` keeps the generated stream key in (case 4, acknowledged).
STREAM_SECRET_NAME = "stream_token"
_STREAM_LABEL = b"agentchat stream_url tokens v1"
_INPUT_LABEL = b"agentchat run input v1"
#: ``Keyring.source`` of keys made for one process's life (SQLite ``:memory:``).
IN_MEMORY_KEYS = "in memory"
#: Prefix of an encrypted run input (a plain one is JSON: it starts with ``{``).
SEALED_PREFIX = b"F1:"


class KeyringError(RuntimeError):
    """The deployment has no safe place for its keys (the message names the fix)."""


def derive(master: str | bytes, label: bytes) -> bytes:
    """32 bytes for one use of ``master`` (HKDF-SHA256): one leaked derived key says
    nothing about the master or the other uses."""
    raw = master.encode() if isinstance(master, str) else master
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=label).derive(raw)


class RunInputSealer:
    """Encrypts and decrypts stored run inputs; an input stored in plain text (before a
    key was configured) still reads."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(base64.urlsafe_b64encode(key))
        #: A digest under the key (Fernet's ciphertexts are random, so not comparable):
        #: two sealers with equal ``key_check`` open each other's inputs (app/key_check.py).
        self.key_check = hmac.new(key, b"agentchat run input key check v1", hashlib.sha256).digest()

    def seal(self, plain: bytes) -> bytes:
        return SEALED_PREFIX + self._fernet.encrypt(plain)

    def open(self, stored: bytes) -> bytes:
        """The plain input; ``ValueError`` when it was sealed under another key."""
        if not stored.startswith(SEALED_PREFIX):
            return stored
        try:
            return self._fernet.decrypt(stored[len(SEALED_PREFIX) :])
        except InvalidToken:
            raise ValueError("the run's stored input was encrypted under another key") from None


@dataclass(frozen=True, slots=True)
class Keyring:
    stream_secret: str
    #: None: run inputs are stored as they are (PostgreSQL, key in the database).
    sealer: RunInputSealer | None
    #: Where the keys came from, for the start-up log (never a key).
    source: str


def key_file_for(db_path: Path) -> Path:
    """``<db>.key`` beside the file SQLite opens (symlinks resolved, as SQLite does): two
    serves given a symlink and its target share one key, and a takeover reads the run
    inputs the other sealed."""
    real = Path(os.path.realpath(db_path))
    return real.with_name(real.name + ".key")


def _legacy_key_file(db_path: Path) -> Path | None:
    """Where an earlier version kept the key of a symlinked ``db_path``: beside the link."""
    legacy = db_path.with_name(db_path.name + ".key")
    return legacy if legacy != key_file_for(db_path) and legacy.is_file() else None


def _file_key(db_path: Path) -> tuple[Path, str]:
    """The key file of ``db_path`` and its key; a key an earlier version kept beside a
    symlink is carried over to the file beside the target (its tokens and sealed run
    inputs still open)."""
    path = key_file_for(db_path)
    legacy = None if path.exists() else _legacy_key_file(db_path)
    if legacy is not None:
        log.warning("the key file moves beside the database's real path (AGENT_DB_PATH is a symlink)",
                    extra={"from": str(legacy), "to": str(path)})
    return path, _read_or_create_key_file(path, None if legacy is None else legacy.read_text().strip())


def _read_or_create_key_file(path: Path, carried: str | None = None) -> str:
    """The master key in ``path``, created (0600) when missing - ``carried`` if given,
    else a new one. Written to a private temporary file, then hard-linked into place: the
    link fails if another process got there first, and then its complete key is read."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                out.write((carried or secrets.token_urlsafe(48)) + "\n")
                out.flush()
                os.fsync(out.fileno())
            with contextlib.suppress(FileExistsError):  # another process's key is in place
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        os.chmod(path, 0o600)
        log.warning("the key file was readable by others; its mode is now 0600", extra={"path": str(path)})
    key = path.read_text().strip()
    if len(key) < 32:
        raise KeyringError(f"the key file {path} is damaged (too short); remove it to generate a new key")
    return key


async def resolve_keyring(settings: Settings, secret_store: SecretStore, *, engine: str) -> Keyring:
    """The keys for this deployment (see the module docstring); ``KeyringError`` when
    PostgreSQL has none configured and keeping one in the database was not accepted."""
    master = settings.secret_key
    if settings.stream_token_secret:
        input_master = master or settings.stream_token_secret
        source = "AGENT_STREAM_TOKEN_SECRET" + (" and AGENT_SECRET_KEY" if master else "")
        return Keyring(settings.stream_token_secret, RunInputSealer(derive(input_master, _INPUT_LABEL)), source)
    if master:
        stream = base64.urlsafe_b64encode(derive(master, _STREAM_LABEL)).decode()
        return Keyring(stream, RunInputSealer(derive(master, _INPUT_LABEL)), "AGENT_SECRET_KEY")
    if engine != "postgres" and str(settings.db_path) == ":memory:":
        # One process, nothing on disk: a key for this process's life is enough.
        memory_key = secrets.token_urlsafe(48)
        stream = base64.urlsafe_b64encode(derive(memory_key, _STREAM_LABEL)).decode()
        return Keyring(stream, RunInputSealer(derive(memory_key, _INPUT_LABEL)), IN_MEMORY_KEYS)
    if engine != "postgres":
        path, file_key = await asyncio.to_thread(_file_key, settings.db_path)
        stream = base64.urlsafe_b64encode(derive(file_key, _STREAM_LABEL)).decode()
        return Keyring(stream, RunInputSealer(derive(file_key, _INPUT_LABEL)), f"key file {path}")
    if not settings.stream_key_in_database:
        raise KeyringError(
            "PostgreSQL needs AGENT_STREAM_TOKEN_SECRET or AGENT_SECRET_KEY (the same on every replica): "
            "without one, the key that signs stream_url links would be kept in the database, where a copy "
            "of it could forge them. Set one (at least 16 random characters), or set "
            "AGENT_STREAM_KEY_IN_DATABASE=1 to accept a key kept in the database."
        )
    log.warning(
        "stream_url tokens are signed with a key kept in the database (AGENT_STREAM_KEY_IN_DATABASE=1); "
        "run inputs are stored unencrypted: set AGENT_SECRET_KEY"
    )
    stored = await secret_store.get_or_create(STREAM_SECRET_NAME, secrets.token_urlsafe(32))
    return Keyring(stored, None, "database (AGENT_STREAM_KEY_IN_DATABASE)")


__all__ = [
    "IN_MEMORY_KEYS",
    "Keyring",
    "KeyringError",
    "RunInputSealer",
    "key_file_for",
    "resolve_keyring",
]
