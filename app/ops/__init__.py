"""Operations: what an operator reads about the service, importable by any room of ``app``.

Prometheus metrics (``metrics``), logging set-up (``logs``) and the per-request log
context with its access log (``log_context``), OpenTelemetry spans (``tracing``),
credentials masked out of logs and ``/readyz`` (``masking``), and the embedder's part of
``/readyz`` (``embedder_check``). Nothing here imports another room of ``app``.
"""
