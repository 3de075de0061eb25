"""What ``agentchat ingest`` says in words: the embedder it chose, the final report
(what was stored, every skipped and rejected file by reason) and what an interruption
leaves. Apart from the commands (``app/cli/kb.py``) so the wording can be read and
tested without the command's database and signal handling around it.
"""

from __future__ import annotations

import re
from typing import Any

from app.cli.counts import plural


def embedder_line(embedder: Any, why: str) -> str:
    """One short line on what ``ingest`` embeds with and why: the chooser's reason
    without its install hints (in parentheses), so a fallback is seen, not a paragraph."""
    reason = short_reason(why)
    if embedder is None:
        return f"embedder: none, documents are stored for text search only ({reason})"
    return f"embedder: {embedder.name} {embedder.model} ({reason})"


def short_reason(why: str) -> str:
    """The embedder chooser's reason without its parenthesised hints, at most 200 characters."""
    reason = why
    while True:
        shorter = re.sub(r"\s*\([^()]*\)", "", reason)
        if shorter == reason:
            break
        reason = shorter
    reason = " ".join(reason.split())
    if len(reason) > 200:
        reason = reason[:199] + "…"
    return reason


#: The ``AGENT_EMBEDDER`` values that name one embedder: when it cannot be had, ``ingest``
#: refuses rather than storing text alone (``--text-only`` goes on).
EXPLICIT_EMBEDDERS = ("gemini", "ollama", "openai", "local")


def refusal_text(kind: str, why: str) -> str:
    """Why ``ingest`` stops before reading anything: the embedder named is not there. It
    went on and stored new and changed documents for text search only, silently
    downgrading what the operator asked for; the same command with ``--text-only`` does."""
    return (
        f"agentchat ingest: AGENT_EMBEDDER={kind} is not available ({short_reason(why)}); "
        "nothing was ingested. Start it and run this again, or add --text-only to store new and changed "
        "documents for text search only (unchanged ones keep their vectors; the service embeds the others "
        "once its embedder answers)"
    )


def other_vectors_line(ours: tuple[str | None, int | None], stored: list[tuple[str, int, int]]) -> str | None:
    """One line when documents hold vectors of another embedder than this ingest's
    (``stored``: ``KBIndex.vector_embedders``), naming both and what happens: unchanged
    documents keep their vectors (``knowledge.ingest_docs.keeps_vectors``), new and changed
    ones get this ingest's vectors or none, and the service re-embeds what is not of its
    embedder. ``None`` when every stored vector is of this ingest's embedder."""
    others = [(model, dim, n) for model, dim, n in stored if (model, dim) != ours]
    if not others:
        return None
    model, dim, n = others[0]
    more = f" (and {plural(sum(o[2] for o in others[1:]), 'document')} of other embedders)" if others[1:] else ""
    key, our_dim = ours
    here = "none" if key is None else f"{key}, {our_dim} dimensions"
    fate = "are stored for text search only" if key is None else f"get {key} vectors"
    hold = "holds" if n == 1 else "hold"
    return (
        f"note: {plural(n, 'document')} {hold} vectors of {model} ({dim} dimensions){more}, not of this ingest's "
        f"embedder ({here}): unchanged documents keep their vectors; new and changed ones {fate}, and a service "
        f"embedding with {model} gives them its vectors in the background"
    )


def interrupted_text(stored: bool) -> str:
    """What an interrupted ingest leaves: every batch stored before the interruption
    stays (each commits on its own), and an index not built yet is built later — a
    bucket's graph by the next open's repair (``agentchat serve`` or the next ingest),
    its searches exact meanwhile. ``stored``: every file was stored (the report was
    printed), the indexes were being built at the load's end."""
    if stored:
        return (
            "agentchat ingest: stopped while building the indexes: the documents above are stored, and an "
            "index not built yet is built when the knowledge base is next opened"
        )
    return (
        "agentchat ingest: the documents stored before the interruption stay; the same command again stores "
        "the rest (unchanged files are skipped)"
    )


def report_text(report: Any, bucket: str, max_file_mb: float, *, examples: int = 20) -> str:
    """The final report: what was stored, then every skipped and rejected file by reason."""
    lines = [
        f"bucket {bucket!r}: {plural(report.files - report.unread_files, 'file')} read"
        + (f" ({report.unread_files} more unchanged, not opened)" if report.unread_files else "")
        + f", {plural(report.added, 'document')} added, {report.updated} updated"
        + (f" ({report.rechunked} re-chunked: cut by older chunking rules)" if report.rechunked else "")
        + f", {report.skipped} unchanged, {report.deleted} deleted, {plural(report.chunks, 'chunk')} ("
        + (f"{report.reused_vectors} kept their stored vectors, " if report.reused_vectors else "")
        + f"{report.elapsed_seconds:.1f} s)"
    ]
    if report.added == report.updated == 0 and report.skipped == 0:
        lines.append(f"nothing was stored; bucket {bucket!r} was not created if it did not exist")
    skipped = sum(report.skipped_files.values())
    if skipped:
        lines.append(f"skipped {plural(skipped, 'file')}:")
        for reason, n in sorted(report.skipped_files.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {n:>7}  {reason}")
    rejected = report.rejected_by_kind()
    if rejected:
        lines.append(f"rejected {len(report.rejected)}:")
        for kind, n in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {n:>7}  {kind}")
        for r in report.rejected[:examples]:
            where = f"{r.source} line {r.line}" if r.line else r.source
            lines.append(f"  rejected: {where}: {r.reason}")
        if len(report.rejected) > examples:
            lines.append(f"  … and {len(report.rejected) - examples} more")
    if report.queued_for_embedding:
        lines.append(
            f"warning: {plural(report.queued_for_embedding, 'document')} stored for text search only, the embedder "
            f"failed ({report.embedding_error}); the server re-embeds them in the background "
            "(agentchat serve over this database), or run this ingest again"
        )
    from knowledge.filecheck import SKIP_TOO_LARGE

    large = [r for r in report.skipped_examples if r.kind == SKIP_TOO_LARGE]
    if large:
        n = report.skipped_files.get(SKIP_TOO_LARGE, len(large))
        lines.append(f"warning: {plural(n, 'file')} over the {max_file_mb:g} MB limit skipped (raise --max-file-mb):")
        lines.extend(f"  {r.source}: {r.reason}" for r in large[:examples])
    return "\n".join(lines)


def unsearched_bucket_note(bucket: str, default_buckets: tuple[str, ...]) -> str | None:
    """A line when chats will not search ``bucket`` unless they name it: it is not among
    ``AGENT_KB_DEFAULT_BUCKETS`` (as this command's environment sets it). Without it, a
    team that ingested its documentation into its own bucket, as ``--bucket`` invites,
    asked the playground about them and was told the knowledge base had no answer,
    with nothing on the command's screen saying why. ``None`` when chats search it."""
    if "*" in default_buckets or bucket in default_buckets:
        return None
    wanted = ",".join((*default_buckets, bucket))
    return (
        f"note: chats search bucket {bucket!r} only when they name it (context.buckets): AGENT_KB_DEFAULT_BUCKETS "
        f"is {','.join(default_buckets)!r} here; to search it by default, set AGENT_KB_DEFAULT_BUCKETS={wanted} "
        "on every replica"
    )


__all__ = [
    "EXPLICIT_EMBEDDERS",
    "embedder_line",
    "interrupted_text",
    "other_vectors_line",
    "refusal_text",
    "report_text",
    "short_reason",
    "unsearched_bucket_note",
]
