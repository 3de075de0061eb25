"""The HTTP edge: every route, face and description a client meets.

Native routes (``http``: chat, runs, conversations, health; ``kb_routes``, ``admin_routes``),
the OpenAI-compatible face (``openai_compat``, ``openai_request``), the Vercel AI SDK UI
stream (``ai_sdk_stream``, its chunks ``ai_sdk_chunks``) and what both faces share (``compat_runs``); the OpenAPI
description (``openapi``, ``openapi_paths``, ``openapi_kb``, ``compat_openapi``) and its
page (``docs_page``); auth (``auth``), admission limits (``limits``), request bounds
(``bounds``), error answers (``problems``), the KB scope of a chat (``context_scope``), the
playground and its static files (``playground``, ``static/``); and ``services``, everything
one app instance owns, hung on ``app.state``. Only the composition (``app.wiring``,
``app.factory``) imports this room.
"""
