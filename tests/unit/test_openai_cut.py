"""``AnswerCut``: an OpenAI client's ``max_tokens`` and ``stop`` on the streamed answer,
with the chunk boundaries a model's stream really has (a stop sequence split in two)."""

from __future__ import annotations

from app.server.openai_cut import AnswerCut


def _run(cut: AnswerCut, chunks: list[str]) -> str:
    return "".join(cut.feed(c) for c in chunks) + cut.finish()


def test_a_stop_sequence_split_across_chunks_is_never_sent() -> None:
    cut = AnswerCut(None, ("END",))
    sent = [cut.feed(c) for c in ["abc E", "N", "D more"]]
    assert sent == ["abc ", "", ""] and cut.reason == "stop" and cut.finish() == ""


def test_text_held_for_a_stop_that_did_not_come_is_sent() -> None:
    cut = AnswerCut(None, ("END",))
    assert [cut.feed("abc E"), cut.feed("N")] == ["abc ", ""]
    assert cut.finish() == "EN" and cut.reason is None
    assert _run(AnswerCut(None, ("END",)), ["a EN", "Dx"]) == "a "


def test_the_earliest_of_several_stops_wins() -> None:
    cut = AnswerCut(None, ("\n\n", "zz"))
    assert _run(cut, ["one zz two\n\nthree"]) == "one " and cut.reason == "stop"


def test_max_tokens_cuts_at_a_word_end_near_the_limit() -> None:
    cut = AnswerCut(5, ())  # 20 characters
    assert _run(cut, ["Runs outlive ", "their connections. ", "More"]) == "Runs outlive their"
    assert cut.reason == "length"


def test_an_answer_exactly_at_the_limit_is_not_cut() -> None:
    cut = AnswerCut(3, ())
    assert _run(cut, ["abcdef", "ghijkl"]) == "abcdefghijkl" and cut.reason is None


def test_a_word_longer_than_the_room_is_cut_inside() -> None:
    cut = AnswerCut(1, ())
    assert _run(cut, ["abcdefgh"]) == "abcd" and cut.reason == "length"
