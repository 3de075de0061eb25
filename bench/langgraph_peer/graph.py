"""The LangGraph peer's graph: one node that streams the same scripted, paced tokens as
the model fakes of our benchmarks (``tests/fakes/paced_ollama.py``,
``tests/fakes/paced_gemini.py``), through LangGraph's ``custom`` stream mode.

Every token is ``"<index>@<CLOCK_MONOTONIC ns>;"``, stamped when the node hands it to
the stream writer, so a client on the same machine can tell how long the server took
to deliver it (``bench/langgraph_peer.py`` reads the stamps the same way for both
servers). ``PEER_TOKENS`` (60) and ``PEER_PAUSE_S`` (0.1) set the script; the pause
comes before each token, as in the fakes.

Loaded by ``langgraph dev`` from ``langgraph.json`` beside it; it imports nothing of ours.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TypedDict

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    question: str
    answer: str


async def answer(state: State) -> State:
    tokens = int(os.environ.get("PEER_TOKENS", "60"))
    pause_s = float(os.environ.get("PEER_PAUSE_S", "0.1"))
    write = get_stream_writer()
    for i in range(tokens):
        await asyncio.sleep(pause_s)
        write({"chunk": f"{i}@{time.monotonic_ns()};"})
    return {"answer": f"{tokens} tokens for {state.get('question', '')}"}


builder = StateGraph(State)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
builder.add_edge("answer", END)
graph = builder.compile()
