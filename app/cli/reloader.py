"""``agentchat serve --reload`` (``make dev``): uvicorn's reloader on the bound sockets.

One of ``serve``'s three ways (``app/cli/serve.py``), apart because it serves nothing
itself: the app is imported by path in a child process (``app/cli/reload_child.py``)
and started again on every change, so what this side owns is only the watch — which
folders, the lock file while the reloader holds it, and the "serving" line once the
child answers (``app/cli/reload_ready.py``). uvicorn is imported inside the functions, so
the other commands never pay for it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from app.config import Settings
from app.ops.logs import announce, uvicorn_log_config

if TYPE_CHECKING:
    from storage.sqlite.writer_lock import WriterLock


def reload_config(host: str, port: int, settings: Settings, *, log_format: str = "text") -> Any:
    """uvicorn's config for ``--reload``: the app by import path, watching only the
    project's packages (``app.cli.serving.PACKAGES``) — never ``.venv`` or ``data``."""
    from app.cli.serving import PACKAGES, PROJECT_ROOT, choose_stack, uvicorn_config

    return uvicorn_config(
        "app.factory:create_app",
        factory=True,
        host=host,
        port=port,
        header_timeout_s=settings.header_timeout_s,
        stack=choose_stack(settings.server_stack),
        reload=True,
        reload_dirs=[str(PROJECT_ROOT / name) for name in PACKAGES if (PROJECT_ROOT / name).is_dir()],
        log_level="info",
        log_config=uvicorn_log_config(log_format),
    )


def run_reloader(config: Any, sockets: list[Any], lock: WriterLock | None, *, serving_line: str) -> None:
    """uvicorn's reloader; its serving child shares the writer lock and dies with it
    (``app/cli/reload_child.py``). ``serving_line`` is said once the child answers."""
    from uvicorn.supervisors import ChangeReload

    from app.cli.reload_child import reload_child
    from app.cli.reload_ready import probe_url, start_watch
    from app.cli.serving import bound_port, display_url
    from app.cli.writer_wait import watch_writer_lock_thread

    for sock in sockets:
        sock.listen(2048)  # connections queue from now on, while the child starts the app
    port = bound_port(sockets[0])
    # The child imports and starts the app (seconds): "serving" only once it answers.
    announce(f"agentchat: starting on {display_url(config.host, port)}  [reloading on changes]")
    _, stop = start_watch(probe_url(config.host, port), serving_line, announce)
    unwatch = threading.Event()
    if lock is not None and lock.held:  # the reloader holds the lock: it watches the lock file, as serve does
        threading.Thread(target=watch_writer_lock_thread, args=(lock, unwatch), name="writer-lock-watch",
                         daemon=True).start()
    try:
        ChangeReload(config, target=reload_child(config, lock), sockets=sockets).run()
    finally:
        stop.set()
        unwatch.set()


__all__ = ["reload_config", "run_reloader"]
